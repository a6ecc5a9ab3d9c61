"""Root conftest: loads the project's pytest plugin (device selection, hypothesis profiles)."""

pytest_plugins = ["verification.plugin"]
