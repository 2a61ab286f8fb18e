"""The scenario loader's checks of the timeline: each [[timeline]] entry against the action table (its fields,
its target, its waits), every problem named with its line. A part of the loader's checker
(`experiments.scenario.loader`), which supplies `fail`, `number`, `string` and `unknown_keys`."""

from __future__ import annotations

from enum import Enum

from experiments.scenario.actions import (
    ACTIONS,
    ENTRY_FIELDS,
    WAITS,
    Action,
    Direction,
    Link,
    LinkFault,
    Target,
)
from experiments.scenario.model import (
    MAX_MEMBERS,
    ClusterSpec,
    TimelineEntry,
)


class TimelineChecks:
    """The timeline's part of the loader's checker."""

    def timeline(self, data: dict, duration: float, cluster: ClusterSpec) -> tuple[TimelineEntry, ...]:
        value = data.get("timeline", [])
        if not isinstance(value, list):
            self.fail(("timeline",), "must be an array of [[timeline]] tables")
            return ()
        entries = []
        for index, table in enumerate(value):
            entry = self.entry(table, index, duration, cluster)
            if entry is not None:
                entries.append(entry)
        return tuple(sorted(entries, key=lambda entry: (entry.at, entry.index)))

    def entry(self, table: object, index: int, duration: float, cluster: ClusterSpec) -> TimelineEntry | None:
        path = ("timeline", index)
        if not isinstance(table, dict):
            self.fail(path, "must be a table")
            return None
        problems_before = len(self.problems)
        entry = self._entry(table, path, index, duration, cluster)
        return entry if len(self.problems) == problems_before else None

    def _entry(self, table: dict, path: tuple, index: int, duration: float,
               cluster: ClusterSpec) -> TimelineEntry | None:
        action_name = table.get("action")
        try:
            action = Action(action_name)
        except ValueError:
            self.fail((*path, "action"), f"unknown action {action_name!r} (expected one of: "
                                         f"{', '.join(action.value for action in Action)})")
            return None
        spec = ACTIONS[action]
        self.unknown_keys(table, {*ENTRY_FIELDS, *spec.fields}, path)
        for key in spec.required:
            if key not in table:
                self.fail((*path, key), f"missing: {action.value} needs {key}")
        at = self.number(table, "at", path, default=None, minimum=0)
        if at is None:
            if "at" not in table:
                self.fail((*path, "at"), "missing: the time of the action in seconds from the start")
            at = 0.0
        elif duration and at >= duration:
            self.fail((*path, "at"), f"at {at} s is not before the end of the timeline (duration {duration} s)")
        fault_duration = self.number(table, "duration", path, default=None, positive=True)
        if fault_duration is not None and duration and at + fault_duration > duration:
            self.fail((*path, "duration"), f"the fault would last until {at + fault_duration} s, "
                                           f"after the end of the timeline ({duration} s)")
        link = fault = None
        if action is Action.LINK:
            link = self.enum(table, "link", path, Link)
            fault = self.enum(table, "fault", path, LinkFault)
            if fault is LinkFault.LATENCY and not table.get("latency_ms"):
                self.fail((*path, "latency_ms"), "a latency fault needs latency_ms > 0")
            if fault is LinkFault.BANDWIDTH and "rate_kbps" not in table:
                self.fail((*path, "rate_kbps"), "a bandwidth fault needs rate_kbps")
        direction = self.enum(table, "direction", path, Direction) or Direction.BOTH
        member = self.target(table, "member", path)
        node = self.target(table, "node", path)
        broker = self.target(table, "broker", path)
        if spec.target is Target.ZK_NODE:
            if cluster.zookeeper_nodes == 0:
                self.fail((*path, "action"), "there is no ZooKeeper in this cluster ([cluster] zookeeper_nodes = 0)")
            elif isinstance(node, int) and node >= cluster.zookeeper_nodes:
                self.fail((*path, "node"), f"node {node} is out of range: the ensemble has "
                                           f"{cluster.zookeeper_nodes} node(s), numbered from 0")
            if 0 < cluster.zookeeper_nodes < spec.min_zookeeper_nodes:
                self.fail((*path, "action"), f"{action.value} needs a {spec.min_zookeeper_nodes}-node ensemble, "
                                             f"this cluster has {cluster.zookeeper_nodes}")
        if isinstance(broker, int) and broker >= cluster.brokers:
            self.fail((*path, "broker"), f"broker {broker} is out of range: the cluster has {cluster.brokers} "
                                         f"broker(s), numbered from 0")
        name = self.string(table, "name", path, default=None)
        pick = self.string(table, "pick", path, default="first", choices=("first", "random"))
        after, timeout = self.wait(table, path)
        return TimelineEntry(
            index=index, line=self.lines.line_of(path) or 0,
            field_lines={key: self.lines.line_of((*path, key)) or 0 for key in table}, at=float(at), action=action, member=member,
            count=self.number(table, "count", path, default=None, positive=True, maximum=MAX_MEMBERS, integer=True),
            to=self.number(table, "to", path, default=None, minimum=0, maximum=MAX_MEMBERS, integer=True),
            interval=self.number(table, "interval", path, default=None, minimum=0),
            spread_s=float(self.number(table, "spread_s", path, default=0.0, minimum=0) or 0.0),
            how=self.string(table, "how", path, default="leave", choices=("leave", "crash")) or "leave",
            pick=pick or "first", link=link, fault=fault, duration=fault_duration,
            latency_ms=float(self.number(table, "latency_ms", path, default=0.0, minimum=0) or 0.0),
            jitter_ms=float(self.number(table, "jitter_ms", path, default=0.0, minimum=0) or 0.0),
            rate_kbps=self.number(table, "rate_kbps", path, default=None, positive=True),
            direction=direction, node=node, broker=broker, name=name, after=after, timeout=timeout,
        )

    def wait(self, table: dict, path: tuple) -> tuple[str | None, float | None]:
        """`after = "stable"` and its `timeout` (seconds past `at`), given together."""
        after = self.string(table, "after", path, default=None, choices=WAITS)
        timeout = self.number(table, "timeout", path, default=None, positive=True)
        if after is not None and "timeout" not in table:
            self.fail((*path, "timeout"), f'missing: after = "{after}" needs a timeout (seconds past `at`)')
        if after is None and "timeout" in table and "after" not in table:
            self.fail((*path, "timeout"), 'a timeout bounds a wait: give after = "stable" with it')
        return after, timeout

    def enum(self, table: dict, key: str, path: tuple, kind: type[Enum]):
        if key not in table:
            return None
        try:
            return kind(table[key])
        except ValueError:
            self.fail((*path, key), f"unknown {key} {table[key]!r} (expected one of: "
                                    f"{', '.join(item.value for item in kind)})")
            return None

    def target(self, table: dict, key: str, path: tuple) -> int | str | None:
        value = table.get(key)
        if value is None or value == "random" or (value == "last" and key == "member"):
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            extra = ', "last"' if key == "member" else ""
            self.fail((*path, key), f"must be an index (0, 1, ...), \"random\"{extra}, got {value!r}")
            return None
        return value
