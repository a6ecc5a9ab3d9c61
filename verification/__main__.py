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
from verification.devices import hide_gpu  # noqa: E402


def _device_asked(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--device" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--device="):
            return arg.split("=", 1)[1]
    return None


if _device_asked(sys.argv[1:]) == "sim":
    # This process is the command's own: a simulator run never touches a real GPU.
    hide_gpu()

sys.exit(main())
