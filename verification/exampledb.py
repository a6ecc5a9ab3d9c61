"""The hypothesis example database runners share: ``BCG_HYPOTHESIS_DB=DIR``.

Point every runner (and every shard) at one directory and a failure found on one of them
is replayed first on all the others. Unset, there is no shared database: the fuzz
campaign keeps none, and ``@given`` tests keep whatever the loaded profile says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

ENV_VAR = "BCG_HYPOTHESIS_DB"


def shared_database(environ: Mapping[str, str] = os.environ) -> ExampleDatabase | None:
    directory = environ.get(ENV_VAR)
    return DirectoryBasedExampleDatabase(directory) if directory else None
