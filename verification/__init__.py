"""Verification harness for breakable CUDA graph implementations.

Data flows one way: a program (``programs``) runs through two executors (eager, and
capture-then-replay with a target from ``targets``), then the ``oracle`` compares them,
and ``report`` turns a finding into a standalone reproducer. ``sim`` stands in for CUDA
on machines without a GPU.
"""
