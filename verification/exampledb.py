"""The hypothesis example database runners share: ``BCG_HYPOTHESIS_DB=DIR`` or ``redis://HOST:PORT/N``.

Point every runner (and every shard) at one value and a failure found on one of them is
replayed first on all the others: a directory serves the runners of one file system, a Redis
server (the ``redis`` extra) those of a CI matrix on separate machines. Unset, there is no
shared database: the fuzz campaign keeps none, and ``@given`` tests keep whatever the loaded
profile says. A value that cannot serve as a database is a :class:`UsageError` before any work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from verification.errors import UsageError

ENV_VAR = "BCG_HYPOTHESIS_DB"
REDIS_SCHEMES = ("redis", "rediss", "unix")
# A runner whose server is unreachable must say so at once, not hang on every example.
_CONNECT_TIMEOUT_S = 5.0


def shared_database(environ: Mapping[str, str] = os.environ) -> ExampleDatabase | None:
    value = environ.get(ENV_VAR)
    if not value:
        return None
    scheme, sep, _ = value.partition("://")
    if not sep:
        return DirectoryBasedExampleDatabase(value)
    if scheme not in REDIS_SCHEMES:
        raise UsageError(
            f"{ENV_VAR}={value}: not a directory nor a redis://HOST:PORT/N URL "
            f"(schemes understood: {', '.join(REDIS_SCHEMES)})"
        )
    return redis_database(value)


def redis_database(url: str) -> ExampleDatabase:
    """hypothesis's Redis database on the server at ``url``, checked to answer now."""
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise UsageError(
            f"{ENV_VAR}={url} needs the redis client: pip install 'breakable-cudagraph[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=_CONNECT_TIMEOUT_S, socket_timeout=_CONNECT_TIMEOUT_S
        )
        client.ping()
    except ValueError as error:
        raise UsageError(f"{ENV_VAR}={url}: not a Redis URL ({error})") from None
    except redis.RedisError as error:
        raise UsageError(f"{ENV_VAR}={url}: cannot reach the Redis server ({error})") from None
    return RedisExampleDatabase(client)
