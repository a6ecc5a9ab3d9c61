"""The harness's user-facing failure and its exit codes, shared by every command.

A :class:`UsageError` is a mistake in what the user asked for: a command prints it as one
``error: ...`` line on stderr and exits :data:`EXIT_USAGE`, never with a traceback.
"""

from __future__ import annotations

# Exit statuses of every command: nothing found, a finding (or a failed check), bad input.
EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A mistake in what the user asked for; the CLI prints it on one line and exits 2."""
