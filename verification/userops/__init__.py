"""A user's break ops (``fuzz-op``, ``certify --ops``): the spec, its contract checks, the
programs that call it, and the campaign."""
