"""The subcommands of ``python -m verification``: one module each, what it parses, runs and prints."""
