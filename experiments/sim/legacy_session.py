"""A 0.8 member's ZooKeeper session when the member is out of contact, in virtual time: the part of
`experiments.sim.legacy.LegacyMember` that kazoo and the ZooKeeper server decide.

A session's connection lost without the session (`suspend`, a ZooKeeper node cut off from its quorum): kazoo's
SUSPENDED, nothing reaches the server or comes back until `reconnect` (another node, the same session), where
what waited goes on, then CONNECTED and, as `legacy_zk.member._rewatch_after_reconnect`, every subscribed path
read again with its watch, a path changed since the last write seen before the disconnect firing its reason.

Split brain's member faults: a member paused (SIGSTOP) runs nothing, and what reaches it waits; a member whose
ZooKeeper link is cut (the lab's proxy black hole) has what crosses the link held. Either way the server hears
nothing: kazoo pings when idle for a third of the session (a request counts as one), and the server expires the
session at its first tick past a session timeout from the last packet, deleting its ids and owner nodes (the others
rebalance). A cut member's kazoo drops the connection (SUSPENDED) when the ping it sent after the cut is still
unanswered a third of the session later, then keeps trying; the attempt after the one under way at the heal gets
the server's answer (`_attempt_wait_ms`). A paused member finds at the resume its connection closed by the server.
Back in contact within the session, the held requests go on (`reconnect`); after an expiry kazoo goes SUSPENDED,
LOST, then CONNECTED on a new session, and the member does what `legacy_zk.member._after_expiry` does: stop
fetching, forget what it owned (`partitions_lost`), register again, a rebalance (trigger `new-session`), then a
second one for every listener zkclient re-fired. The watcher executor's work under way when the session died is
dropped with it; the auto-commit thread's request blocked meanwhile is sent again in the new session."""

from __future__ import annotations

from collections.abc import Generator

from legacy_zk.registry import topic_path
from legacy_zk.zk import RECONNECT_BACKOFF_CAP_S
from rebalance import events as ev
from zkensemble.config import EnsembleConfig

ZK_TICK_MS = EnsembleConfig.tick_ms   # the lab's ZooKeeper tickTime: sessions expire on its boundaries
# kazoo's reconnect retry as legacy_zk gives it (`legacy_zk.zk.reconnect_retry`): 0.1 s doubling to 1 s, no jitter
RETRY_FIRST_MS, RETRY_CAP_MS = 100.0, RECONNECT_BACKOFF_CAP_S * 1000

Request = tuple            # (op, path, kwargs) a step of a member's work yields


class SessionFaults:
    """Suspension and reconnection, a pause, a cut link, an expiry and the new session; the member's state and
    its `_run`, `_register`, `_rebalance` and `_work` are `LegacyMember`'s."""

    def suspend(self) -> None:
        """The connection to the member's ZooKeeper node dropped; the session lives on in the ensemble."""
        if self.alive and not self.suspended:
            self.suspended, self._zxid_before, self._suspended_at = True, self.zk.zxid, self.sim.now_ms
            self.recorder.emit(ev.SESSION_STATE, self.name, state="SUSPENDED")

    def reconnect(self) -> None:
        """Connected to another node within the session: what waited goes on, then the watches are read again."""
        if not self.suspended:
            return
        self.suspended = False
        if not self.alive:
            return
        self.recorder.emit(ev.SESSION_STATE, self.name, state="CONNECTED")
        parked, self._parked = self._parked, []
        for then in parked:
            then()
        self._run(self._rewatch(self._zxid_before), lambda: None, worker=False)

    def _rewatch(self, since: int) -> Generator[Request, object, None]:
        changed = []
        if (yield ("get_children", self.paths.ids, {"watch": True, "missing_ok": True})) is not None \
                and self.zk.nodes[self.paths.ids].pzxid > since:
            changed.append("ids-changed")
        for topic in sorted(self.topics):
            path = topic_path(topic)
            if (yield ("get", path, {"watch": True, "missing_ok": True})) is not None and self.zk.nodes[path].mzxid > since:
                changed.append("topic-changed")
        for reason in changed:
            self._fire(reason)

    def _connected(self, then) -> None:
        """Across the member's connection: now, or once it is back (or the process resumed)."""
        if self.suspended or self.frozen or self.cut_off:
            self._parked.append(then)
        else:
            then()

    # -- split brain's member faults: the process paused, the ZooKeeper link cut ---------------------

    # A pause and a cut on one member at once: contact is lost at the first and comes back at the last.

    def pause(self) -> None:
        """SIGSTOP: nothing of the member runs (its application and auto-commit thread stop where they are); its
        session expires unless it resumes in time."""
        if self.alive and not self.frozen:
            self.frozen = True
            self.clock.pause()
            if not self.cut_off:
                self._out_of_contact(notices=False)

    def resume(self) -> None:
        if self.frozen:
            self.frozen = False
            self.clock.resume()
            if not self.cut_off:   # the dropped connection tried again after kazoo's first delay
                self._back_in_contact(wait_ms=RETRY_FIRST_MS)

    def cut(self) -> None:
        """The ZooKeeper link black-holed: what crosses it is held; kazoo notices when its ping goes unanswered."""
        if self.alive and not self.cut_off:
            self.cut_off = True
            if not self.frozen:
                self._out_of_contact(notices=True)

    def heal(self) -> None:
        if self.cut_off:
            self.cut_off = False
            if not self.frozen:
                self._back_in_contact(wait_ms=self._attempt_wait_ms() if self.suspended else 0.0)

    def _attempt_wait_ms(self) -> float:
        """kazoo's reconnect loop from SUSPENDED to the heal: before each attempt the retry's delay (0.1 s doubling to
        1 s), each attempt's handshake held until its timeout (the session over the servers). The attempt under way at
        the heal breaks (a real run's kazoo logs "socket connection broken" there) and the next one, after the
        following delay, gets the server's answer; a heal during a delay is answered at its end."""
        suspended_for = self.sim.now_ms - self._suspended_at
        attempt_ms = self.config.zookeeper_session_timeout_ms / self.zk_nodes
        elapsed, delay = 0.0, RETRY_FIRST_MS
        while True:
            elapsed += delay
            if suspended_for <= elapsed:
                return elapsed - suspended_for
            delay = min(2 * delay, RETRY_CAP_MS)
            if suspended_for < elapsed + attempt_ms:
                return delay
            elapsed += attempt_ms

    def _out_of_contact(self, *, notices: bool) -> None:
        """The server's expiry of the session, and (`notices`) kazoo's loop while the link is cut."""
        third = self.config.zookeeper_session_timeout_ms / 3
        # kazoo pings when idle for a third of the session (any request counts as one): what the server last heard
        self._last_sent_ms += (self.sim.now_ms - self._last_sent_ms) // third * third
        # ZooKeeper expires a session at the first tick after its timeout from the last packet (its ExpiryQueue)
        expiry = ((self._last_sent_ms + self.config.zookeeper_session_timeout_ms) // ZK_TICK_MS + 1) * ZK_TICK_MS
        session = self.session
        self._contact_timers = [self.sim.at(expiry, lambda: self._expire(session))]
        if notices:
            self._ping_outstanding = False
            self._kazoo_loop()

    def _kazoo_loop(self) -> None:
        """kazoo's connection loop while the link is cut: a ping once idle for a third of the session (held
        requests count as sent), the connection dropped (SUSPENDED) when a ping is still unanswered at the next
        deadline; each deadline 10-400 ms early (its jitter)."""
        if not self.alive or not self.cut_off or self.suspended:
            return
        now, third = self.sim.now_ms, self.config.zookeeper_session_timeout_ms / 3
        due = self._last_sent_ms + third - self.sim.rng.randint(1, 40) * 10
        if due > now:
            self._contact_timers.append(self.sim.at(due, self._kazoo_loop))
        elif self._ping_outstanding:
            self.suspend()
        else:
            self._ping_outstanding, self._last_sent_ms = True, now
            self._contact_timers.append(self.sim.at(now + third - self.sim.rng.randint(1, 40) * 10, self._kazoo_loop))

    def _expire(self, session: int | None) -> None:
        if self.alive and session == self.session and (self.frozen or self.cut_off):
            self.expired = True
            self.zk.close_session(session)

    def _back_in_contact(self, *, wait_ms: float) -> None:
        for timer in self._contact_timers:
            timer.cancel()
        self._contact_timers = []
        if not self.alive:
            return
        if not self.expired:
            if self.suspended:
                self.sim.after(wait_ms + 2 * self.network.delay_ms(), self.reconnect)   # the same session
            else:   # not noticed yet: the held messages go through
                parked, self._parked = self._parked, []
                for then in parked:
                    then()
            return
        # The server says the session expired: SUSPENDED (a paused member reads its closed connection), LOST, and
        # a new session. What the old one had under way failed with it.
        if not self.suspended:
            self.suspended = True
            self.recorder.emit(ev.SESSION_STATE, self.name, state="SUSPENDED")
        self.incarnation += 1
        self._parked, self.reasons, self.working = [], set(), False
        if not self._retried:   # an auto-commit blocked in its request goes on in the next session
            self._committing = self._commit_due = False
        self.sim.after(wait_ms + 2 * self.network.delay_ms(), self._lost)

    def _lost(self) -> None:
        if self.alive:
            self.recorder.emit(ev.SESSION_STATE, self.name, state="LOST")   # kazoo's retry reset: its first delay
            self.sim.after(RETRY_FIRST_MS + 2 * self.network.delay_ms(), self._new_session)

    def _new_session(self) -> None:
        """0.8's handleNewSession on the watcher executor, then the listeners zkclient re-fired."""
        if not self.alive:
            return
        self.suspended = self.expired = False
        self._parked = []
        self.session = self.zk.open_session()
        self.recorder.emit(ev.SESSION_STATE, self.name, state="CONNECTED")
        self.working = True
        self._run(self._after_expiry(), self._refire)
        for send in list(self._retried.values()):   # zkclient's retry: what was blocked goes out again
            send()

    def _after_expiry(self) -> Generator[Request, object, None]:
        """0.8's handleNewSession: fetching stops (the positions of partitions no longer this member's are not
        committed), what it owned is forgotten, it registers again and rebalances."""
        self.positions = {}
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_LOST, self.name, partitions=sorted(map(str, self.owned)))
        self.owned = {}
        yield from self._register()
        yield from self._rebalance(frozenset({"new-session"}))

    def _refire(self) -> None:
        self.reasons |= {"ids-changed", "topic-changed"}
        self._work()
