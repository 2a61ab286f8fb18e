"""Fixture plugins, one module per area, so each area owns its own fixtures."""

import importlib.util

_PLUGINS = ["tests.fixtures.zk", "tests.fixtures.broker", "tests.fixtures.spark"]

pytest_plugins = [name for name in _PLUGINS if importlib.util.find_spec(name) is not None]
