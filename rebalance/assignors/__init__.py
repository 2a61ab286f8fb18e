"""Partition assignment strategies, chosen by name.

    from rebalance.assignors import get_assignor
    get_assignor("cooperative-sticky").assign({"t0": 3}, {"C0": Subscription(("t0",))})

Names: the Kafka client strategies (`range`, `roundrobin`, `sticky`, `cooperative-sticky`),
the `optimal` baseline, the 0.8 ZooKeeper strategies (`legacy-range`, `legacy-roundrobin`),
or a custom assignor given as an import path "package.module:ClassName".
"""

from __future__ import annotations

import importlib

from rebalance.assignors.base import Assignor, Group, Plan, RebalanceProtocol
from rebalance.assignors.classic import RangeAssignor, RoundRobinAssignor
from rebalance.assignors.cooperative import CooperativeStickyAssignor, cooperative_rounds
from rebalance.assignors.legacy import LegacyRangeAssignor, LegacyRoundRobinAssignor
from rebalance.assignors.optimal import OptimalAssignor, solve_optimal
from rebalance.assignors.sticky import StickyAssignor

_BUILTIN: dict[str, type[Assignor]] = {
    cls.name: cls
    for cls in (
        RangeAssignor,
        RoundRobinAssignor,
        StickyAssignor,
        CooperativeStickyAssignor,
        OptimalAssignor,
        LegacyRangeAssignor,
        LegacyRoundRobinAssignor,
    )
}

# The strategies of the coordinator protocol (what a classic member may put in JoinGroup), plus the baseline.
ASSIGNOR_NAMES: tuple[str, ...] = ("range", "roundrobin", "sticky", "cooperative-sticky", "optimal")
LEGACY_NAMES: tuple[str, ...] = ("legacy-range", "legacy-roundrobin")


def get_assignor(name: str) -> Assignor:
    """A fresh assignor for a built-in name or a "package.module:ClassName" import path."""
    if name in _BUILTIN:
        return _BUILTIN[name]()
    if ":" in name:
        return _load_custom(name)
    known = ", ".join(ASSIGNOR_NAMES + LEGACY_NAMES)
    raise ValueError(f"unknown assignor {name!r}; choose one of {known}, or give package.module:ClassName")


def _load_custom(path: str) -> Assignor:
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"custom assignor {path!r}: cannot import {module_name!r} ({error})") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"custom assignor {path!r}: {module_name!r} has no {class_name!r}")
    assignor = cls()
    for attribute in ("name", "rebalance_protocol", "assign"):
        if not hasattr(assignor, attribute):
            raise ValueError(f"custom assignor {path!r} has no {attribute!r}; subclass rebalance.assignors.Assignor")
    if str(assignor.rebalance_protocol) not in {p.value for p in RebalanceProtocol}:
        raise ValueError(f"custom assignor {path!r}: rebalance_protocol must be 'eager' or 'cooperative'")
    return assignor


__all__ = [
    "ASSIGNOR_NAMES",
    "LEGACY_NAMES",
    "Assignor",
    "CooperativeStickyAssignor",
    "Group",
    "OptimalAssignor",
    "Plan",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "cooperative_rounds",
    "get_assignor",
    "solve_optimal",
]
