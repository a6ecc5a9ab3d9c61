"""Tests of the library, ``breakable_cudagraph``, as its users call it."""
