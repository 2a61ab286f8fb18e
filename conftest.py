"""Fixture plugins, one module per area, so each area owns its own fixtures; and the order in which test
files go to the workers (longest first, tests/longest_first.py). No measured capacity applies to the suite."""

import importlib.util
import os

# The suite's runs are small and must not be held against a capacity someone measured in this checkout
# (experiments.run.capacity): /dev/null reads as "not measured".
os.environ["LAB_CAPACITY_FILE"] = os.devnull

_PLUGINS = ["tests.fixtures.zk", "tests.fixtures.broker", "tests.fixtures.spark", "tests.longest_first", "tests.suite_clock"]

pytest_plugins = [name for name in _PLUGINS if importlib.util.find_spec(name) is not None]
