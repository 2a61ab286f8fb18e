"""A timeline step as the runner applies it, in virtual time: its events (`phase`, `fault_started`, `fault_stopped`),
then its effect on the members, their links or the servers; a timed fault's heal, and the final heal before settling.
The state (members, recorders, faults in force) is `experiments.sim.play._Play`'s."""

from __future__ import annotations

from collections.abc import Callable

from experiments.faults.history import FAULT_KEYS, fault_kind
from experiments.scenario.actions import Action, Span, phase_name, spec_of
from experiments.scenario.model import Step
from experiments.sim import legacy
from experiments.sim.server_faults import SERVER_FAULTS
from rebalance import events as ev


class TimelineSteps:
    def apply(self, step: Step) -> None:
        self.applied.append({"fault_id": step.fault_id, "op": step.op, "at": step.at,
                             "offset_s": round((self.sim.now_ms - self.timeline_start_ms) / 1000, 3)})
        action = Action(step.action)
        spec = spec_of(action)
        if not spec.is_fault:
            self.runner.emit(ev.PHASE, name=phase_name(action, step.targets, dict(step.params)), fault_id=step.fault_id,
                             targets=list(step.targets),
                             **({"params": dict(step.params)} if "waited_s" in step.params else {}))
        elif step.op == "heal":
            self.heal(step)
            return
        else:
            started = self.runner.emit(ev.FAULT_STARTED, **self.fault_fields(step))
            undone = {a.value for a in spec.undoes}
            for fault_id, event in list(self.active.items()):   # a restart ends a member's crash or leave
                if event["action"] in undone and set(event["targets"]) & set(step.targets):
                    self.runner.emit(ev.FAULT_STOPPED, **{key: event[key] for key in FAULT_KEYS},
                                     observed_ts_ns=self.observed.pop(fault_id, None),
                                     healed_ts_ns=self.recorders.clock()[0], healed_by=step.fault_id)
                    del self.active[fault_id]
            if spec.span is Span.INSTANT:
                now_ns = self.recorders.clock()[0]
                self.runner.emit(ev.FAULT_STOPPED, **self.fault_fields(step), observed_ts_ns=now_ns, healed_ts_ns=now_ns)
            else:
                self.active[step.fault_id] = started
            if action in SERVER_FAULTS:   # a killed broker refuses connections at once: seen as it happens
                self.observed[step.fault_id] = self.recorders.clock()[0]
        do: dict[Action, Callable[[str], None]] = {Action.LEAVE: self.leave,
                                                   Action.CRASH: self.crash,
                                                   Action.PAUSE: lambda name: self.members[name].pause(),
                                                   Action.LINK: self.cut}
        if action is Action.JOIN or (action is Action.SCALE and step.targets and step.targets[0] not in self.members):
            self.join_wave(step)
            return
        if action is Action.RESTART:   # a host covered whole restarts as one process
            self.restart(step.targets)
            return
        if action is Action.SCALE:
            act = self.leave
        elif action in SERVER_FAULTS:
            act = lambda target: self.servers.start(action, target)  # noqa: E731
        else:
            act = do.get(action)
        for name in step.targets if act else ():
            act(name)

    def heal(self, step: Step) -> None:
        """A timed fault's end: the member resumed, its link healed; its effect was seen from its start."""
        started = self.active.pop(step.fault_id, None)
        self.undo(step.action, step.targets)
        self.runner.emit(ev.FAULT_STOPPED, **self.fault_fields(step),
                         observed_ts_ns=None if started is None else started["ts_ns"],
                         healed_ts_ns=self.recorders.clock()[0])

    def final_heal(self) -> None:
        """The runner's heal before settling: every fault still in force undone and closed."""
        now_ns = self.recorders.clock()[0]
        for fault_id, started in list(self.active.items()):
            self.undo(started["action"], started["targets"])
            self.runner.emit(ev.FAULT_STOPPED, **{key: started[key] for key in FAULT_KEYS},
                             observed_ts_ns=self.observed.pop(fault_id, None), healed_ts_ns=now_ns, healed_by="final-heal")
            del self.active[fault_id]

    def undo(self, action: str, targets) -> None:
        for name in targets:
            if action == Action.PAUSE.value:
                self.members[name].resume()
            elif action == Action.LINK.value:
                self.heal_link(name)
            elif Action(action) in SERVER_FAULTS:
                self.servers.heal(Action(action), name)

    def cut(self, name: str) -> None:
        """A member's coordination link black-holed: a coordinator client's link to its broker, a 0.8 member's to
        ZooKeeper (the member models what its client notices)."""
        member = self.members[name]
        if isinstance(member, legacy.LegacyMember):
            member.cut()
        else:
            self.network.cut(self.member_id(name))

    def heal_link(self, name: str) -> None:
        member = self.members[name]
        if isinstance(member, legacy.LegacyMember):
            member.heal()
        else:
            self.network.heal(self.member_id(name))

    def fault_fields(self, step: Step) -> dict:
        return {"fault_id": step.fault_id, "kind": fault_kind(step), "action": step.action,
                "target": ",".join(step.targets), "targets": list(step.targets),
                "member_ids": [self.member_id(name) for name in step.targets] if spec_of(step.action).hits_members
                else [], "link": step.link,
                "params": dict(step.params), "emulated": step.emulated, "at_s": step.at, "line": step.line}
