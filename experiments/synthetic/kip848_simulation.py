"""A synthetic KIP-848 group: no barrier, each member converging on its own, as the kip848 member logs it.

The events follow the kip848 member's contract. Every heartbeat is a `coordination_request` with op
ConsumerGroupHeartbeat and a `detail` word (rebalance.heartbeat_kinds): `join`, `leave`, `ack` (it reports
partitions it let go or took), `assignment` (the answer changed what it owns) or `steady`. A change
of membership bumps the group epoch and gives a new target (sticky: each member keeps what it has up
to its fair share); only the members whose target differs hear of it. Such a member logs
`rebalance_started` (trigger "assignment"), revokes exactly the partitions that move away at once,
and receives the partitions it gains `rebalance_s` later (once their previous owner released them);
its `rebalance_completed` (generation = member epoch, assigned = its whole target) follows when it
owns its target. Everyone else keeps consuming and heartbeating `steady`.

The servers' sample counts what the broker counts: the non-steady heartbeats, FindCoordinator and
OffsetFetch, never a steady heartbeat.
"""

from __future__ import annotations

from experiments.synthetic.simulation import GROUP, _Simulation
from rebalance import events as ev
from rebalance import heartbeat_kinds

HEARTBEAT_INTERVAL_S = 1.0     # the broker's heartbeat interval in the simulation


class Kip848Simulation(_Simulation):
    FENCING_ERROR = "STALE_MEMBER_EPOCH"      # a commit from an older member epoch
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.next_beat: dict[str, float] = {}
        self.target: dict[str, set[int]] = {}      # the coordinator's target at the current group epoch

    def _in_brokers(self) -> bool:
        return True

    def _generation(self) -> int:
        return self.generation     # the member epoch; here every member at the group epoch

    # -- requests --------------------------------------------------------------------

    def _request(self, t: float, member: str, op: str, detail: str | None = None) -> None:
        fields = {"detail": detail} if detail else {}
        self.out.event(member, t, member, ev.COORDINATION_REQUEST, op=op, group=GROUP,
                       latency_ms=round(self.rng.uniform(0.2, 2.0), 3), error=None, **fields)
        if detail != heartbeat_kinds.STEADY:
            self.served += 1

    def _consume(self, t: float) -> None:
        for member in list(self.live):       # the rhythm: one steady heartbeat per interval and member
            due = self.next_beat.get(member)
            if due is not None and due <= t:
                self._request(t, member, heartbeat_kinds.API, heartbeat_kinds.STEADY)
                self.next_beat[member] = due + HEARTBEAT_INTERVAL_S
        super()._consume(t)

    # -- membership ------------------------------------------------------------------

    def _start_member(self, t: float) -> None:
        super()._start_member(t)
        member = self.live[-1]
        self._request(t, member, "FindCoordinator")
        self._request(t + 0.0002, member, heartbeat_kinds.API, heartbeat_kinds.JOIN)
        self.next_beat[member] = t + HEARTBEAT_INTERVAL_S

    def _stop_member(self, t: float, member: str) -> None:
        owned = self._owned(member)
        if owned:     # it lets go of its partitions, then says it leaves; member_stopped comes last
            self._commit(t, member, owned)
            self.out.event(member, t, member, ev.PARTITIONS_REVOKED, partitions=[self.tps[p] for p in owned])
            for p in owned:
                self.owner[p] = None
        self._request(t + 0.0005, member, heartbeat_kinds.API, heartbeat_kinds.LEAVE)
        self.out.event(member, t + 0.001, member, ev.MEMBER_STOPPED, reason="close")
        self.live.remove(member)
        self.next_beat.pop(member, None)

    # -- the coordinator's target and each member's convergence ------------------------

    def _rebalance(self, t: float, trigger: str) -> None:
        """A new group epoch and a sticky target. A member that must give partitions up hears of it in its
        next answer (just after the join or leave that caused it) and revokes at once; a member that
        gains hears only when the partitions are released, `rebalance_s` later. The rest hear nothing."""
        self.generation += 1
        for p, owner in enumerate(self.owner):
            if owner is not None and owner not in self.live:
                self.owner[p] = None          # a crashed member's partitions are free once its session ended
        self.target = self._sticky_target()
        self.rebalance_started_at = t
        answered = t + 0.0005                 # after the join heartbeat that caused it
        for member in sorted(self.live):
            moving = sorted(set(self._owned(member)) - self.target[member])
            if not moving:
                continue
            self.out.event(member, answered, member, ev.REBALANCE_STARTED, trigger="assignment", group=GROUP)
            self._request(answered, member, heartbeat_kinds.API, heartbeat_kinds.ASSIGNMENT)
            self._commit(answered + 0.001, member, moving)
            self.out.event(member, answered + 0.001, member, ev.PARTITIONS_REVOKED,
                           partitions=[self.tps[p] for p in moving])
            for p in moving:
                self.owner[p] = None
            self._request(answered + 0.002, member, heartbeat_kinds.API, heartbeat_kinds.ACK)
            if self.target[member] <= set(self._owned(member)):   # it only gave partitions up
                self._completed(answered + 0.002, member, self.target[member], t)
        self.assign_at = t + self.c.rebalance_s

    def _assign(self, t: float) -> None:
        """Members whose target holds partitions they do not own get them, now that they are free."""
        self.assign_at = None
        for member in sorted(self.live):
            gained = sorted(p for p in self.target.get(member, ()) - set(self._owned(member))
                            if p != self.orphan and self.owner[p] is None)
            if not gained:
                continue
            self.out.event(member, t, member, ev.REBALANCE_STARTED, trigger="assignment", group=GROUP)
            self._request(t, member, heartbeat_kinds.API, heartbeat_kinds.ASSIGNMENT)
            self._request(t, member, "OffsetFetch")
            for p in gained:
                self.owner[p] = member
                self.position[p] = self.committed[p]
            self.out.event(member, t, member, ev.PARTITIONS_ASSIGNED, partitions=[self.tps[p] for p in gained])
            self._request(t + 0.001, member, heartbeat_kinds.API, heartbeat_kinds.ACK)
            self._completed(t + 0.001, member, set(self._owned(member)), self.rebalance_started_at)

    def _completed(self, t: float, member: str, assigned: set[int], since: float) -> None:
        self.out.event(member, t, member, ev.REBALANCE_COMPLETED, generation=self.generation,
                       assigned=[self.tps[p] for p in sorted(assigned)], duration_ms=round((t - since) * 1000, 3),
                       attempts=1, protocol=self.c.strategy)

    def _sticky_target(self) -> dict[str, set[int]]:
        """Each member keeps what it owns up to its share (members in id order take the larger shares);
        free and surplus partitions go to the members below their share, in partition order."""
        members = sorted(self.live)
        if not members:
            return {}
        per, extra = divmod(self.c.partitions, len(members))
        share = {member: per + (1 if index < extra else 0) for index, member in enumerate(members)}
        target = {member: set(sorted(self._owned(member))[:share[member]]) for member in members}
        taken = set().union(*target.values())
        free = [p for p in range(self.c.partitions) if p not in taken]
        for member in members:
            while len(target[member]) < share[member] and free:
                target[member].add(free.pop(0))
        return target
