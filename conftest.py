"""Fixture plugins, one module per area, so each area owns its own fixtures; and the order in which test
files go to the workers (longest first, tests/longest_first.py)."""

import importlib.util

_PLUGINS = ["tests.fixtures.zk", "tests.fixtures.broker", "tests.fixtures.spark", "tests.longest_first"]

pytest_plugins = [name for name in _PLUGINS if importlib.util.find_spec(name) is not None]
