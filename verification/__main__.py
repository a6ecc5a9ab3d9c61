"""Entry point of ``python -m verification``; see :mod:`verification.cli` for the commands."""

import sys
import warnings

# torch warns on import when numpy is absent (it is not a dependency here, and nothing in
# the harness uses it); the CLI's contract is one line on stderr for a usage error.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

try:
    import hypothesis  # noqa: F401
except ImportError:
    # The library needs only torch; the harness also needs the test extras.
    print(
        "error: the verification harness needs hypothesis: pip install -e '.[test]'",
        file=sys.stderr,
    )
    sys.exit(2)

from verification.cli import main  # noqa: E402

sys.exit(main())
