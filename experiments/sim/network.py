"""The simulated loopback between members and their coordinator, with the two faults split brain puts on a member:
its coordination link cut, and its process paused.

- `Network`: one-way delays (loopback plus a seeded jitter) and each member's coordination link. A cut is the lab's
  proxy black hole (`experiments.faults.proxy`, `coord` class): whatever crosses the link meanwhile, either way, is
  held and delivered in order after the heal, as TCP retransmission would; the data link (fetches) is not touched.
- `MemberClock`: a member's own timers and arrivals. While its process is paused (SIGSTOP) nothing of it runs; what
  fell due meanwhile runs at the resume, in the order it fell due, unless it was cancelled first.
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.sim.kernel import Simulation, Timer

NETWORK_ONE_WAY_MS = 0.25          # loopback, as the lab's runs have it: requests answer in well under 1 ms
NETWORK_JITTER_MS = 0.15
# While the warm-up's host processes are still coming up they hold both cores, and a message waits for its sender's
# or receiver's process to be scheduled: in a real seed002 warm-up (20 hosts starting on 2 cores, 2026-12-06) the
# members' first FindCoordinator took 14.3 ms at the median and their joins 10.4 ms ([0.9-396] and [1.7-99] ms,
# n = 50 each), against 1.1 ms for the same heartbeats later. Each one-way trip then takes an extra wait drawn from
# an exponential of this mean per process still starting beyond the cores (fitted to those medians: 19 processes
# beyond 2 cores at the start, a round trip of two such waits).
LOADED_WAIT_MS_PER_PROCESS = 0.35


class Network:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._held: dict[str, list[Callable[[], None]]] = {}   # per member whose coordination link is cut
        self._starting_until: list[float] = []   # when each host process started in the warm-up comes up
        self._cores = 1
        self._last_arrival: dict[str, float] = {}

    def starting(self, ready_ms: list[float], cores: int) -> None:
        """Host processes that began together now and come up at `ready_ms`: until then they load the cores."""
        self._starting_until = sorted(self.sim.now_ms + ready for ready in ready_ms)
        self._cores = cores

    def delay_ms(self) -> float:
        delay = NETWORK_ONE_WAY_MS + self.sim.rng.random() * NETWORK_JITTER_MS
        if self._starting_until:
            now = self.sim.now_ms
            while self._starting_until and self._starting_until[0] <= now:
                self._starting_until.pop(0)
            beyond = len(self._starting_until) - self._cores
            if beyond > 0:
                delay += self.sim.rng.expovariate(1 / (LOADED_WAIT_MS_PER_PROCESS * beyond))
        return delay

    def send(self, member: str, deliver: Callable[[], None]) -> None:
        """One message over `member`'s coordination link, either way: `deliver` runs after a one-way delay, or
        after the heal when the link is cut at the moment it would arrive."""
        arrival = self.sim.now_ms + self.delay_ms()
        if self._starting_until:   # a link keeps its order (TCP) when the waits drawn would swap two messages
            arrival = max(arrival, self._last_arrival.get(member, arrival))
            self._last_arrival[member] = arrival
        self.sim.at(arrival, lambda: self._arrive(member, deliver))

    def _arrive(self, member: str, deliver: Callable[[], None]) -> None:
        if member in self._held:
            self._held[member].append(deliver)
        else:
            deliver()

    def cut(self, member: str) -> None:
        self._held.setdefault(member, [])

    def heal(self, member: str) -> None:
        delay = self.delay_ms()
        for deliver in self._held.pop(member, []):
            self.sim.after(delay, deliver)   # one delay for all: ties run in the order scheduled, as TCP keeps it

    def is_cut(self, member: str) -> bool:
        return member in self._held


class MemberClock:
    """The timers of one member's process (its client's threads and its application): paused and resumed as one."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.paused = False
        self._frozen: list[Timer] = []   # fell due while paused, in that order

    def at(self, due_ms: float, action: Callable[[], None]) -> Timer:
        return self.sim.schedule(_ProcessTimer(due_ms, action, self))

    def after(self, delay_ms: float, action: Callable[[], None]) -> Timer:
        return self.at(self.sim.now_ms + delay_ms, action)

    def run(self, action: Callable[[], None]) -> None:
        """Something arriving now (an answer from the network): runs now, or at the resume."""
        if self.paused:
            self.hold(Timer(self.sim.now_ms, action))
        else:
            action()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        frozen, self._frozen = self._frozen, []
        for timer in frozen:
            self.sim.after(0, lambda timer=timer: None if timer.cancelled else timer.action())

    def hold(self, timer: Timer) -> None:
        """A timer that fell due while the process is paused: it runs at the resume unless cancelled first."""
        self._frozen.append(timer)


class _ProcessTimer(Timer):
    """A timer of a member's process: at its time it runs, or waits for the resume if the process is paused. It
    holds its clock and not the other way round, so a timer that has fired is freed at once: no reference cycle is
    left for the cyclic collector, which a seed of a hundred members and half a million timers would keep busy."""

    def __init__(self, due_ms: float, action: Callable[[], None], clock: MemberClock) -> None:
        super().__init__(due_ms, action)
        self.clock = clock

    def fire(self) -> None:
        if self.clock.paused:
            self.clock.hold(self)
        else:
            self.action()


def exchange(network: Network, clock: MemberClock, member: str, *, to_coordinator, on_answer, record,
             timeout_ms: float | None = None, on_timeout=None) -> None:
    """One request and its answer over `member`'s coordination link. `to_coordinator(reply)` runs at the
    coordinator (None: a request the model only counts, answered there at once); the answer comes back on the
    member's clock to `on_answer(result)`, after `record(result, None)` writes its coordination_request. With
    `timeout_ms` the client gives up on it then: `record(None, "NETWORK_EXCEPTION")`, `on_timeout()`, and an answer
    after that is dropped, as the real client's aborted connection drops it."""
    open_ = [True]
    timer: list[Timer] = []

    def arrive(result) -> None:
        if not open_[0]:
            return
        open_[0] = False
        for pending in timer:
            pending.cancel()
        record(result, None)
        on_answer(result)

    def reply(result=None) -> None:
        network.send(member, lambda: clock.run(lambda: arrive(result)))

    def expire() -> None:
        if open_[0]:
            open_[0] = False
            record(None, "NETWORK_EXCEPTION")
            on_timeout()

    if timeout_ms is not None:
        timer.append(clock.after(timeout_ms, expire))
    network.send(member, (lambda: reply()) if to_coordinator is None else (lambda: to_coordinator(reply)))
