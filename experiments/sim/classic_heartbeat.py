"""The classic client's heartbeat thread in virtual time (Kafka 3.7's `AbstractCoordinator.HeartbeatThread`): a
beat every heartbeat.interval.ms while the member has joined, the coordinator looked up again when a session
passes unanswered, and what a heartbeat's answer asks of the member (rejoin, or out of the group). Part of
`experiments.sim.classic.ClassicMember`, whose state it reads as Kafka's inner thread reads its coordinator's."""

from __future__ import annotations

from experiments.sim.classic_timing import State
from modern.common import errors
from modern.coordinator.classic_group import Heartbeat, HeartbeatResult


class HeartbeatThread:
    """The heartbeat half of a simulated classic member (mixed into `ClassicMember`)."""

    def _start_heartbeats(self) -> None:
        self._session_from_ms = self.sim.now_ms
        self._schedule_beat(self.timing.heartbeat_interval_ms)

    def _schedule_beat(self, delay_ms: float) -> None:
        self._stop_heartbeats()
        self._heartbeat = self.clock.after(delay_ms, self._beat)

    def _stop_heartbeats(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    def _beat(self) -> None:
        self._heartbeat = None
        if not self._alive or self.state in (State.JOINING, State.UNJOINED):
            return   # the heartbeat thread is disabled until the member has joined (hasNotJoinedGroup)
        remaining = self._session_from_ms + self.timing.session_timeout_ms - self.sim.now_ms
        if remaining <= 0:   # no answer for a whole session (a paused process wakes up to this): look it up again
            self.coordinator_known = False
        if not self.coordinator_known:
            self._rediscover()
            return
        # Given up when the session runs out, not at the request timeout: then the coordinator is looked up again.
        request = Heartbeat(member_id=self.member_id, generation_id=self.generation)
        self._request("Heartbeat", self._beaten, to_coordinator=lambda reply: self.coordinator.heartbeat(request, reply),
                      detail="steady", timeout_ms=max(remaining, 1), on_timeout=self._heartbeat_failed)

    def _heartbeat_failed(self) -> None:
        if not self._alive:
            return
        self.coordinator_known = False
        self._schedule_beat(self.timing.retry_backoff_ms)

    def _rediscover(self) -> None:
        """The heartbeat thread looks the coordinator up again (through the coordination link: a cut holds it)."""
        if self._looking:
            return
        self._looking = True

        def found() -> None:
            self._looking, self.coordinator_known, self._session_from_ms = False, True, self.sim.now_ms
            self._schedule_beat(self.timing.retry_backoff_ms)

        def failed() -> None:
            self._looking = False
            self._schedule_beat(self.timing.retry_backoff_ms)

        self._request("FindCoordinator", found, timeout_ms=self.timing.request_timeout_ms, on_timeout=failed)

    def _beaten(self, answer: HeartbeatResult) -> None:
        if not self._alive:
            return
        self._session_from_ms = self.sim.now_ms
        if answer.error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID) \
                and self.state is State.UNJOINED:
            return   # already out of the group (a commit's answer said so first)
        self._start_heartbeats()
        if answer.error is errors.REBALANCE_IN_PROGRESS and self.state is State.STABLE:
            if self.app is None:
                self._rejoin("heartbeat: REBALANCE_IN_PROGRESS")
            else:   # the application's next poll prepares and sends the JoinGroup
                self._rejoin_reason = self._rejoin_reason or "heartbeat: REBALANCE_IN_PROGRESS"
                self._news()
        elif answer.error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID):
            self._stop_heartbeats()
            self._lose_membership(keep_id=answer.error is errors.ILLEGAL_GENERATION)
            if self.app is None:
                self._rejoin(f"heartbeat: {errors.name_of(answer.error)}")
            else:
                self.state = State.UNJOINED   # no partitions, no generation: the next poll rejoins
                self._rejoin_reason = f"heartbeat: {errors.name_of(answer.error)}"
                self._news()
