"""The test suite, laid out as the project is: ``library/`` tests ``breakable_cudagraph``,
``sim/`` the simulator against CUDA's graph semantics, ``harness/`` the rest of
``verification``, ``plugin/`` the pytest plugin. Shared helpers stay here, imported as
``tests.X``; packages, so that test modules in different folders may share a name."""
