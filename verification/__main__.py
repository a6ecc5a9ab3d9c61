"""Entry point of ``python -m verification``; see :mod:`verification.cli` for the commands."""

import sys

from verification.cli import main

sys.exit(main())
