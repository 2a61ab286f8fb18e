"""How a fault or a membership change is named wherever a person reads it: the charts, the runner's live
display and final line, the convergence verdict and `rebalance-lab events`.

A fault event's `kind` is its action (`crash`, `zk_kill`, ...) or, for a link fault, the fault itself
(`partition`, `latency`, ...): experiments/scenario/actions.py. A link fault is named after what it does to
the member's link, so that "partition" is never read as a Kafka partition.
"""

from __future__ import annotations

from experiments.scenario.actions import MEMBERSHIP_KINDS, LinkFault

_LINK_EFFECT = {
    LinkFault.PARTITION.value: "cut off",
    LinkFault.RESET.value: "connections reset",
    LinkFault.LATENCY.value: "delayed",
    LinkFault.BANDWIDTH.value: "throttled",
    LinkFault.DOWN.value: "link down",
}
_LINKS = {"coord": "coord", "data": "data", "both": "coord and data"}


def is_membership_change(kind: object) -> bool:
    """A fault event that is really a member leaving on purpose."""
    return kind in MEMBERSHIP_KINDS


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def fault_label(kind: object, target: object, link: object = None) -> str:
    """`m001 cut off (coord)`, `m002 delayed (data)`, `m004 leaves`, `crash m001`, `zk_kill zk-0`."""
    kind, target, link = _text(kind), _text(target), _text(link)
    if kind in _LINK_EFFECT:
        where = f" ({_LINKS.get(link, link)})" if link else ""
        return f"{target or 'a member'} {_LINK_EFFECT[kind]}{where}"
    if is_membership_change(kind):
        return f"{target or 'a member'} leaves"
    return f"{kind} {target}".strip()
