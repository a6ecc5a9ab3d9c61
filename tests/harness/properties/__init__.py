"""The property checks: each holds on the library and finds its planted bugs."""
