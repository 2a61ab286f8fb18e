"""Valid frames with hostile values against a running broker, with the coordinator's invariants checked
after every batch.

Each batch is drawn by hypothesis (experiments.fuzz.hostile_values) and sent one request at a time.
After it, the checks:

    answers          every request answered within the limit (a second), and a fresh connection's
                     ApiVersions too
    error-codes      where Kafka answers a value with an error code, the same code
    group-states     every group touched is in a state Kafka allows for its kind
    disjoint         no partition held by two members of one group (classic: the assignments handed out
                     in a Stable group; consumer groups: the members' current assignments)
    steady           the well-behaved members (experiments.fuzz.steady) keep their groups, heartbeats and
                     commits, and their committed offsets never go back
    memory           the broker's resident memory stays within MEMORY_LIMIT_MB of its first reading

A broken check is kept with its evidence (the batch, the request, the answer); the run goes on to its end.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
from kafka.protocol.metadata import ApiVersionsRequest

from experiments.fuzz.hostile_values import Hostile, batches
from experiments.fuzz.steady import SteadyMembers
from modern.client.connection import BrokerConnection, ConnectionFailed, parse_address
from modern.common.consumer_group_messages import ConsumerGroupDescribeRequest

ANSWER_LIMIT_S = 1.0
MEMORY_LIMIT_MB = 256
CLASSIC_STATES = {"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}
CONSUMER_STATES = {"empty", "assigning", "reconciling", "stable", "dead", "Empty", "Assigning", "Reconciling",
                   "Stable", "Dead"}
CHECKED_GROUPS_PER_BATCH = 40


@dataclass
class HostileReport:
    requests: Counter = field(default_factory=Counter)        # by API
    batches: int = 0
    violations: list[dict] = field(default_factory=list)
    slowest_answer_s: float = 0.0
    rss_mb: list[float] = field(default_factory=list)          # one reading a batch, when the broker's pid is known
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict:
        broken = Counter(v["check"] for v in self.violations)
        return {"batches": self.batches, "requests": sum(self.requests.values()), "by_api": dict(self.requests),
                "seconds": round(self.seconds, 1), "slowest_answer_s": round(self.slowest_answer_s, 3),
                "rss_mb_first": round(self.rss_mb[0], 1) if self.rss_mb else None,
                "rss_mb_max": round(max(self.rss_mb), 1) if self.rss_mb else None,
                "rss_mb_last": round(self.rss_mb[-1], 1) if self.rss_mb else None,
                "violations": dict(broken), "first_violations": self.violations[:20]}


class HostileRun:
    def __init__(self, bootstrap: str, *, batch_size: int = 12, answer_limit_s: float = ANSWER_LIMIT_S,
                 broker_pid: int | None = None) -> None:
        self.host, self.port = parse_address(bootstrap)
        self.connection = BrokerConnection(self.host, self.port, client_id="hostile", timeout_s=30)
        self.batch_size = batch_size
        self.answer_limit_s = answer_limit_s
        self.broker_pid = broker_pid if broker_pid is not None else listening_pid(self.port)
        self.report = HostileReport()
        self.steady = SteadyMembers(BrokerConnection(self.host, self.port, client_id="steady", timeout_s=30))
        self._fresh_classic: list[str] = []
        self._fresh_consumer: list[str] = []

    def run(self, seconds: float, *, chunk: int = 10,
            on_progress: Callable[[HostileReport, float], None] | None = None,
            progress_every_s: float = 60.0) -> HostileReport:
        """Send hostile batches for `seconds`; `on_progress(report, elapsed)` is called every `progress_every_s`."""
        started = time.monotonic()
        next_progress = progress_every_s
        target = self.steady.form()
        self._memory()

        def report_progress() -> None:
            # Looked at after every batch: on a loaded machine one chunk can outlast the whole run.
            nonlocal next_progress
            elapsed = time.monotonic() - started
            if on_progress is not None and next_progress <= elapsed < seconds:
                on_progress(self.report, elapsed)
                next_progress = (elapsed // progress_every_s + 1) * progress_every_s

        @settings(max_examples=chunk, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(batch=batches(target, self.batch_size))
        def one_batch(batch: list[Hostile]) -> None:
            if time.monotonic() - started < seconds:
                self.batch(batch)
                report_progress()

        while time.monotonic() - started < seconds:
            one_batch()
        self.report.seconds = time.monotonic() - started
        self.connection.close()
        self.steady.connection.close()
        return self.report

    # ------------------------------------------------------------ one batch

    def batch(self, batch: list[Hostile]) -> None:
        self.report.batches += 1
        for hostile in batch:
            self._send(hostile)
        self._check_answers_at_all()
        for problem in self.steady.keep_alive() + self.steady.commit_and_check():
            self._violation("steady", problem)
        self._check_classic_groups()
        self._check_consumer_groups()
        self._memory()

    def _send(self, hostile: Hostile) -> None:
        self.report.requests[hostile.kind] += 1
        began = time.monotonic()
        try:
            answer = self.connection.request(hostile.request, timeout_s=max(self.answer_limit_s * 10, 10))
        except ConnectionFailed as error:
            self._violation("answers", f"{hostile.kind}: no answer ({error})", hostile)
            return
        took = time.monotonic() - began
        self.report.slowest_answer_s = max(self.report.slowest_answer_s, took)
        if took > self.answer_limit_s:
            self._violation("answers", f"{hostile.kind} answered after {took:.2f} s", hostile)
        for where, code in answer_codes(hostile, answer):
            allowed = hostile.expect.get(where)
            if allowed is not None and code not in allowed:
                self._violation("error-codes", f"{hostile.kind} {where}: error {code}, Kafka answers "
                                               f"{sorted(allowed)}", hostile)
        if hostile.fresh_group:
            self._fresh_classic.append(hostile.fresh_group)
        if hostile.fresh_consumer_group:
            self._fresh_consumer.append(hostile.fresh_consumer_group)

    def _check_answers_at_all(self) -> None:
        probe = BrokerConnection(self.host, self.port, client_id="hostile-probe", timeout_s=self.answer_limit_s)
        began = time.monotonic()
        try:
            probe.request(ApiVersionsRequest[3](client_software_name="hostile", client_software_version="1"))
        except ConnectionFailed as error:
            self._violation("answers", f"a new connection's ApiVersions: {error} after {time.monotonic() - began:.2f} s")
        finally:
            probe.close()

    def _check_classic_groups(self) -> None:
        groups = [self.steady.classic_group] + self._fresh_classic[-CHECKED_GROUPS_PER_BATCH:]
        self._fresh_classic.clear()
        answer = self.connection.request(DescribeGroupsRequest[5](groups=groups, include_authorized_operations=False))
        for group in answer.groups:
            if group.group_state not in CLASSIC_STATES:
                self._violation("group-states", f"classic group {group.group_id[:60]!r} in state {group.group_state!r}")
            if group.group_id == self.steady.classic_group and (group.group_state != "Stable" or len(group.members) != 1):
                self._violation("steady", f"the steady classic group is {group.group_state} with "
                                          f"{len(group.members)} members")
            if group.group_state == "Stable":
                owners = [(m.member_id, _classic_partitions(m.member_assignment)) for m in group.members]
                self._disjoint(group.group_id, owners)

    def _check_consumer_groups(self) -> None:
        groups = [self.steady.consumer_group] + self._fresh_consumer[-CHECKED_GROUPS_PER_BATCH:]
        self._fresh_consumer.clear()
        answer = self.connection.request(ConsumerGroupDescribeRequest[0](group_ids=groups,
                                                                         include_authorized_operations=False))
        for group in answer.groups:
            if group.error_code != 0:
                continue   # a group that is gone (every member left or was refused)
            if group.group_state not in CONSUMER_STATES:
                self._violation("group-states", f"consumer group {group.group_id[:60]!r} in state {group.group_state!r}")
            owners = [(m.member_id, {(t.topic_id, p) for t in m.assignment.topic_partitions for p in t.partitions})
                      for m in group.members]
            self._disjoint(group.group_id, owners)

    def _disjoint(self, group_id: str, owners: list[tuple[str, set | None]]) -> None:
        seen: dict[Any, str] = {}
        for member, partitions in owners:
            for partition in partitions or ():
                if partition in seen and seen[partition] != member:
                    self._violation("disjoint", f"group {group_id[:60]!r}: {partition} held by {seen[partition][:40]} "
                                                f"and {member[:40]}")
                seen[partition] = member

    def _memory(self) -> None:
        if self.broker_pid is None:
            return
        rss = rss_mb(self.broker_pid)
        if rss is None:   # the process found at the start is gone: look again once
            self.broker_pid = listening_pid(self.port)
            rss = rss_mb(self.broker_pid) if self.broker_pid is not None else None
        if rss is None:
            return
        self.report.rss_mb.append(rss)
        if rss > self.report.rss_mb[0] + MEMORY_LIMIT_MB:
            self._violation("memory", f"broker RSS {rss:.0f} MB, {self.report.rss_mb[0]:.0f} MB at the start")

    def _violation(self, check: str, detail: str, hostile: Hostile | None = None) -> None:
        entry = {"check": check, "batch": self.report.batches, "detail": detail}
        if hostile is not None:
            entry["request"] = describe_request(hostile.request)
        self.report.violations.append(entry)


def answer_codes(hostile: Hostile, answer: Any) -> list[tuple[str, int]]:
    """(where, error code) for every error the answer carries, named as `Hostile.expect` names them."""
    kind = hostile.kind
    if kind == "OffsetCommit":
        return [(f"{t.name}-{p.partition_index}", p.error_code) for t in answer.topics for p in t.partitions]
    if kind == "LeaveGroup":
        return [("error", answer.error_code)] + [(m.member_id, m.error_code) for m in answer.members]
    if kind == "DescribeGroups":
        return [("groups", g.error_code) for g in answer.groups]
    if kind == "ConsumerGroupDescribe":
        steady = hostile.request.group_ids[-1]
        return [("steady-described", g.error_code) for g in answer.groups if g.group_id == steady]
    return [("error", answer.error_code)]


def describe_request(request: Any) -> str:
    text = repr(request)
    return text if len(text) <= 600 else text[:600] + f"... ({len(text)} characters)"


def _classic_partitions(assignment: bytes) -> set | None:
    if not assignment:
        return set()
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
    except Exception:
        return None   # bytes a hostile leader handed out: not an assignment to check
    return {(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions}


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def listening_pid(port: int) -> int | None:
    """The local process listening on `port` (from /proc), or None when it is elsewhere or not ours to see."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    # This process first (an in-process broker): a child forked a moment ago holds the same socket until it
    # execs, and would be found in its place and gone by the time its memory is read.
    pids = [str(os.getpid()), *(pid for pid in os.listdir("/proc") if pid.isdigit() and pid != str(os.getpid()))]
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return int(pid)
        except OSError:
            continue
    return None
