"""The ``bcg`` pytest plugin: host projects, shards, workers, the shared example database."""
