"""Entry point of ``python -m verification``; see :mod:`verification.commands.cli` for the commands."""

import os
import sys
import warnings

# torch warns on import when numpy is absent (it is not a dependency here, and nothing in
# the harness uses it); the CLI's contract is one line on stderr for a usage error.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
# Warnings torch's C++ raises outside any Python call (a graph reset in a destructor after a
# capture the harness broke on purpose) bypass Python's warnings and print straight to
# stderr, for every check child too; set before torch loads. Those raised inside a call still
# reach Python, where the harness says whose they are.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

try:
    import hypothesis  # noqa: F401
except ImportError:
    # The library needs only torch; the harness also needs the test extras.
    print(
        "error: the verification harness needs hypothesis: pip install -e '.[test]'",
        file=sys.stderr,
    )
    sys.exit(2)

from verification.commands.cli import main  # noqa: E402

sys.exit(main())
