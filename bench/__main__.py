"""``python -m bench`` runs :mod:`bench.run`."""

from bench.run import main

raise SystemExit(main())
