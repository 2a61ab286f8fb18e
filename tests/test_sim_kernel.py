"""The virtual clock's timers and a member process's own: order, pause and resume, and memory."""

from __future__ import annotations

import gc
import weakref

from experiments.sim.kernel import Simulation
from experiments.sim.network import MemberClock


def test_a_member_timer_that_has_fired_is_freed_without_the_cyclic_collector():
    """A seed fires hundreds of thousands of a member's timers with the collector off: each must go when it has run,
    or the seed's memory and the collection after it grow with every timer (docs/simulation.md, "Speed")."""
    sim = Simulation(seed=1)
    clock = MemberClock(sim)
    ran = []
    timer = clock.after(5, lambda: ran.append(sim.now_ms))
    freed = weakref.ref(timer)
    del timer
    collecting = gc.isenabled()
    gc.disable()
    try:
        sim.run_until(10)
        assert ran == [5]
        assert freed() is None, "the fired timer is still held (a reference cycle)"
    finally:
        if collecting:
            gc.enable()


def test_a_paused_process_runs_what_fell_due_at_the_resume_in_order_unless_cancelled():
    sim = Simulation(seed=1)
    clock = MemberClock(sim)
    ran = []
    clock.after(1, lambda: ran.append(("first", sim.now_ms)))
    cancelled = clock.after(2, lambda: ran.append(("cancelled", sim.now_ms)))
    clock.after(3, lambda: ran.append(("second", sim.now_ms)))
    clock.pause()
    sim.run_until(2.5)
    cancelled.cancel()
    sim.run_until(10)
    assert ran == []
    clock.resume()
    sim.run_until(20)
    assert ran == [("first", 10), ("second", 10)]
