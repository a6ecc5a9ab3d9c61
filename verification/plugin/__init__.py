"""The ``bcg`` pytest plugin: its hooks, fuzz sharding and one GPU per xdist worker."""
