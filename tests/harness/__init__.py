"""The harness (``verification``): programs, oracle, fuzzer, certify, the commands."""
