"""Kafka's `uniform` server-side assignor, computed the way Kafka's group coordinator computes it.

Kafka picks one of two algorithms per computation:
- every member subscribes to the same topics (homogeneous): quotas, keep, hand out;
- otherwise (heterogeneous): keep what is still subscribed, hand out the rest to the least loaded
  subscriber topic by topic, then move partitions from the most to the least loaded subscribers.

The homogeneous algorithm changed between releases, and both are here:
- `uniform` is Kafka 4.0's. With P partitions and N members every member may keep P // N of what
  it holds, and the first P mod N members *in the coordinator's member-map order* may keep one
  more, whoever holds what. When a member joins, the walk shifts by one place and some of the
  members that held the extra partition lose it: a balanced group moves partitions that did not
  need to move.
- `uniform_41` is the fix that followed (KAFKA-18688, on Kafka's trunk since May 2025, so in 4.1
  and later): a member that already holds P // N + 1 keeps them while extra places remain, and the
  places left over go to the members at the end of the walk that still have room.
The heterogeneous algorithm is the same in both.

"Member-map order" is the iteration order of a Java HashMap keyed by member id, reproduced by
`modern.coordinator.java_order`; topics are walked in the order of their topic ids (the lab's ids come from
`rebalance.topic_ids`), and a member's partitions in the order of the Java set that holds them.
Where the result depends on these orders, the lab follows Kafka's; where Kafka's order depends on
something the lab does not have (the insertion order of two keys in one bucket), the caller's order
stands in. Racks are not used (Kafka 4.0's uniform does not use them either).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from modern.coordinator.java_order import (
    java_order,
    member_map_order,
    partition_set_order,
    table_size_after_puts,
    table_size_for_copy,
    uuid_hashcode,
    uuid_sort_key,
)
from rebalance.topic_ids import topic_id as lab_topic_id

TopicPartition = tuple[str, int]
Assignment = frozenset[TopicPartition]
TopicIds = Callable[[str], uuid.UUID]


def uniform(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
            previous: Mapping[str, Assignment], *, topic_id: TopicIds = lab_topic_id,
            instance_ids: Mapping[str, str] | None = None) -> dict[str, Assignment]:
    """Kafka 4.0's `uniform`: the extra partitions go to the first members of the walk.

    `previous` is the previous target assignment; `instance_ids` is accepted for a common calling
    convention and not used (Kafka's uniform ignores static membership)."""
    group = _Group.of(subscriptions, partition_counts, previous, topic_id)
    if group.homogeneous:
        return group.result(_homogeneous(group, _quotas_in_walk_order))
    return group.result(_Heterogeneous(group).assign())


def uniform_41(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
               previous: Mapping[str, Assignment], *, topic_id: TopicIds = lab_topic_id,
               instance_ids: Mapping[str, str] | None = None) -> dict[str, Assignment]:
    """Kafka 4.1's `uniform`: members that hold an extra partition keep it while places remain."""
    group = _Group.of(subscriptions, partition_counts, previous, topic_id)
    if group.homogeneous:
        return group.result(_homogeneous(group, _quotas_kept_by_holders))
    return group.result(_Heterogeneous(group).assign())


def uniform_heterogeneous(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
                          previous: Mapping[str, Assignment], *,
                          topic_id: TopicIds = lab_topic_id) -> dict[str, Assignment]:
    """The heterogeneous algorithm alone, whatever the subscriptions (Kafka's own tests also run it
    on identical ones, by declaring the group heterogeneous)."""
    group = _Group.of(subscriptions, partition_counts, previous, topic_id)
    return group.result(_Heterogeneous(group).assign())


# ---------------------------------------------------------------- the group as the assignor sees it


@dataclass(frozen=True)
class _Group:
    """The assignor's input, put in Kafka's orders once.

    `members` is the member-map walk; `topics[m]` what m subscribes to among existing topics;
    `held[m]` m's previous target as (topic, partitions) in the order Kafka iterates them;
    `given` the members in the caller's order, the order of the result."""

    members: tuple[str, ...]
    topics: Mapping[str, frozenset[str]]
    held: Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]]
    counts: Mapping[str, int]
    topic_id: TopicIds
    homogeneous: bool
    given: tuple[str, ...]

    @classmethod
    def of(cls, subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
           previous: Mapping[str, Assignment], topic_id: TopicIds) -> _Group:
        ids = {topic: topic_id(topic) for topic in partition_counts}  # looked up often: once per topic
        members = tuple(member_map_order(subscriptions))
        topics = {m: frozenset(t for t in subscriptions[m] if t in partition_counts) for m in members}
        layout = tuple((topic, count, ids[topic]) for topic, count in sorted(partition_counts.items()))
        nothing: Assignment = frozenset()
        held = {m: _held_for(previous.get(m, nothing), layout) for m in members}
        _refuse_shared_partitions(held)
        # Kafka calls a group homogeneous when every member subscribes to the same topic names,
        # existing or not.
        homogeneous = len({frozenset(s) for s in subscriptions.values()}) <= 1
        return cls(members, topics, held, dict(partition_counts), ids.__getitem__, homogeneous, tuple(subscriptions))

    def topic_set_order(self, topics: set[str] | frozenset[str]) -> list[str]:
        """Topics as a `HashSet` of topic ids copied from a subscription iterates them."""
        return java_order(sorted(topics), self._topic_hash, table_size_for_copy(len(topics)))

    def topic_sort_key(self, topic: str) -> tuple[int, int]:
        return uuid_sort_key(self.topic_id(topic))

    def _topic_hash(self, topic: str) -> int:
        return uuid_hashcode(self.topic_id(topic))

    def result(self, assigned: Mapping[str, list[TopicPartition]]) -> dict[str, Assignment]:
        return {m: frozenset(assigned.get(m, ())) for m in self.given}


@functools.lru_cache(maxsize=1 << 17)
def _held_for(owned: Assignment, layout: tuple[tuple[str, int, uuid.UUID], ...]
              ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """`_held_in_kafka_order` for the topics `layout` gives (name, partitions, id), kept between computations:
    a group's target is computed again on every epoch, and most members hold the same partitions as before."""
    counts = {topic: count for topic, count, _ in layout}
    ids = {topic: topic_uuid for topic, _, topic_uuid in layout}
    return _held_in_kafka_order(owned, counts, ids.__getitem__)


def _held_in_kafka_order(owned: Assignment, counts: Mapping[str, int], topic_id: TopicIds) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A member's previous target the way Kafka holds it: a map from topic id to a set of
    partitions, both rebuilt from the target-assignment record (the map one put per topic, the
    set copied whole). Partitions that no longer exist are left out, as a recreated topic's would
    be (its new id matches no subscription)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in owned:
        if 0 <= partition < counts.get(topic, 0):
            by_topic.setdefault(topic, []).append(partition)
    order = sorted(by_topic)
    if len(order) > 1:
        order = java_order(order, lambda t: uuid_hashcode(topic_id(t)), table_size_after_puts(len(order)))
    return tuple((topic, tuple(partition_set_order(by_topic[topic]))) for topic in order)


def _refuse_shared_partitions(held: Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]]) -> None:
    """A target assignment gives each partition to one member at most; refuse one that does not."""
    seen: dict[TopicPartition, str] = {}
    for member, topics in held.items():
        for topic, partitions in topics:
            for partition in partitions:
                other = seen.setdefault((topic, partition), member)
                if other != member:
                    raise ValueError(f"partition {topic}-{partition} is in the previous target of both "
                                     f"{other!r} and {member!r}")


# ---------------------------------------------------------------- homogeneous subscriptions


def _homogeneous(group: _Group, quotas: Callable[..., tuple[dict[str, list[TopicPartition]], list[list]]]
                 ) -> dict[str, list[TopicPartition]]:
    """Every member subscribes to the same topics. Three steps:

    1. List the partitions nobody holds, topic by topic (topics in their id set's order).
    2. Walk the members, each keeping what it holds up to its quota; what it holds beyond goes to
       the end of the list (`quotas` decides the quotas: the one thing 4.0 and 4.1 do differently).
    3. Walk the members that still have room, in the same order, each taking the next partitions
       of the list until its room is filled."""
    if not group.members:
        return {}
    subscribed = group.topic_set_order(group.topics[group.members[0]])
    if not subscribed:
        return {}
    held_now = {(t, p) for m in group.members for t, ps in group.held[m] for p in ps}
    unassigned = [(t, p) for t in subscribed for p in range(group.counts[t]) if (t, p) not in held_now]
    total = sum(group.counts[t] for t in subscribed)
    minimum, extra = divmod(total, len(group.members))

    kept, room = quotas(group, set(subscribed), minimum, extra, unassigned)

    cursor = 0
    for member, free in room:
        taken = unassigned[cursor:cursor + free]
        kept[member].extend(taken)
        cursor += len(taken)
    if cursor < len(unassigned):  # the quotas add up to every partition, so this cannot happen
        raise RuntimeError(f"uniform left {len(unassigned) - cursor} partitions unassigned")
    return kept


def _keep(group: _Group, member: str, subscribed: set[str], quota: int,
          revoked: list[TopicPartition]) -> tuple[list[TopicPartition], int]:
    """Keep what `member` holds of the subscribed topics, in Kafka's order, up to `quota`; append
    the rest to `revoked`. Returns what it keeps and the room left under its quota."""
    kept: list[TopicPartition] = []
    for topic, partitions in group.held[member]:
        if topic not in subscribed:
            continue  # no longer subscribed: dropped, not handed to anyone
        keep = partitions[:quota]
        kept.extend((topic, p) for p in keep)
        revoked.extend((topic, p) for p in partitions[quota:])
        quota -= len(keep)
    return kept, quota


def _quotas_in_walk_order(group: _Group, subscribed: set[str], minimum: int, extra: int,
                          revoked: list[TopicPartition]) -> tuple[dict[str, list[TopicPartition]], list[list]]:
    """Kafka 4.0: the first `extra` members of the walk have room for `minimum + 1`, the others for
    `minimum`, whatever they hold now. Each keeps what fits; who keeps fewer has room left."""
    kept: dict[str, list[TopicPartition]] = {}
    room: list[list] = []
    for position, member in enumerate(group.members):
        quota = minimum + (1 if position < extra else 0)
        kept[member], free = _keep(group, member, subscribed, quota, revoked)
        if free > 0:
            room.append([member, free])
    return kept, room


def _quotas_kept_by_holders(group: _Group, subscribed: set[str], minimum: int, extra: int,
                            revoked: list[TopicPartition]) -> tuple[dict[str, list[TopicPartition]], list[list]]:
    """Kafka 4.1: walking the members while extra places remain, a member that holds `minimum + 1`
    keeps them and uses up a place; one that holds less leaves the place to someone else. The
    places still free at the end go to the members with room, the last of the walk first."""
    kept: dict[str, list[TopicPartition]] = {}
    room: list[list] = []
    places = extra
    for member in group.members:
        may_take_extra = places > 0
        kept[member], free = _keep(group, member, subscribed, minimum + (1 if may_take_extra else 0), revoked)
        if may_take_extra and free > 0:
            free -= 1               # it could not fill minimum + 1 from what it held: the place stays open
            may_take_extra = False
        if may_take_extra:
            places -= 1             # it holds minimum + 1 and keeps them
        if free > 0 or (places > 0 and not may_take_extra):
            room.append([member, free])
    for entry in reversed(room):    # open places, from the end of the walk backwards
        if places == 0:
            break
        entry[1] += 1
        places -= 1
    return kept, [entry for entry in room if entry[1] > 0]


# ---------------------------------------------------------------- heterogeneous subscriptions

_MAX_BALANCING_ROUNDS = 16  # Kafka's cap on passes over the topics in the final balancing step


class _Heterogeneous:
    """Members subscribe to different topics. Members are numbered in walk order; per topic, its
    subscribers in that order; per partition, its owner's number (-1: nobody)."""

    def __init__(self, group: _Group) -> None:
        self.group = group
        self.members = group.members
        self.load = [0] * len(self.members)        # partitions each member has in the target so far
        self.assigned: dict[str, list[TopicPartition]] = {m: [] for m in self.members}
        self.subscribers: dict[str, list[int]] = {}
        for index, member in enumerate(self.members):
            for topic in group.topics[member]:
                self.subscribers.setdefault(topic, []).append(index)
        self.owner = {topic: [-1] * group.counts[topic] for topic in self.subscribers}

    def assign(self) -> dict[str, list[TopicPartition]]:
        if not self.subscribers:
            return {}
        self._keep_subscribed()
        self._hand_out_unowned()
        self._balance()
        return self.assigned

    def _topic_order_key(self, topic: str) -> tuple[float, int, tuple[int, int]]:
        """Topics with the most partitions per subscriber first (they are the hardest to spread),
        then those with fewer subscribers, then by topic id."""
        subscribers = len(self.subscribers[topic])
        return -(self.group.counts[topic] / subscribers), subscribers, self.group.topic_sort_key(topic)

    def _keep_subscribed(self) -> None:
        """Step 1: every member keeps all it holds of the topics it still subscribes to."""
        for index, member in enumerate(self.members):
            for topic, partitions in self.group.held[member]:
                if topic in self.group.topics[member]:
                    for partition in partitions:
                        self._give(topic, partition, index)

    def _hand_out_unowned(self) -> None:
        """Step 2: topic by topic, each partition nobody holds goes to the least loaded subscriber."""
        unowned = {topic: [p for p, o in enumerate(owners) if o == -1] for topic, owners in self.owner.items()}
        ladder = _Ladder(self.load)
        for topic in sorted((t for t in unowned if unowned[t]), key=self._topic_order_key):
            ladder.start(self.subscribers[topic])
            for partition in unowned[topic]:
                self._give(topic, partition, ladder.next_least_loaded())

    def _balance(self) -> None:
        """Step 3: pass over the topics that have two subscribers or more, moving partitions from
        their most to their least loaded subscribers; stop after a full pass that moved nothing (or
        after Kafka's cap on passes)."""
        topics = sorted((t for t, s in self.subscribers.items() if len(s) >= 2), key=self._topic_order_key)
        ladder = _Ladder(self.load)
        last_moved = -1  # the topic whose balancing moved something last; reaching it again ends
        for _ in range(_MAX_BALANCING_ROUNDS):
            for position, topic in enumerate(topics):
                if position == last_moved:
                    return
                if self._balance_topic(topic, ladder) > 0 or last_moved == -1:
                    last_moved = position

    def _balance_topic(self, topic: str, ladder: _Ladder) -> int:
        """Move this topic's partitions from its most to its least loaded subscribers until their
        loads differ by one at most, or the most loaded have nothing of this topic left to give.
        A donor gives its highest-numbered partition of the topic first."""
        if ladder.start(self.subscribers[topic]) <= 1:
            return 0
        owners = self.owner[topic]
        by_owner = sorted(range(len(owners)), key=lambda p: (owners[p], p))
        first: dict[int, int] = {}
        end: dict[int, int] = {}  # by_owner[first[m]:end[m]] are m's partitions not yet given away
        for position, partition in enumerate(by_owner):
            first.setdefault(owners[partition], position)
            end[owners[partition]] = position + 1
        moved = 0
        while not ladder.balanced():
            donor = ladder.next_most_loaded()
            while donor is not None and end.get(donor, 0) - first.get(donor, 0) <= 0:
                ladder.drop_last_most_loaded()  # nothing of this topic to give: out of the running
                donor = ladder.next_most_loaded()
            if donor is None:
                break
            end[donor] -= 1
            partition = by_owner[end[donor]]
            receiver = ladder.next_least_loaded()
            if ladder.balanced():
                break
            self._give(topic, partition, receiver)
            moved += 1
        return moved

    def _give(self, topic: str, partition: int, index: int) -> None:
        """Make member `index` the partition's owner in the target, taking it from its owner if any."""
        previous_owner = self.owner[topic][partition]
        if previous_owner != -1:
            self.assigned[self.members[previous_owner]].remove((topic, partition))
            self.load[previous_owner] -= 1
        self.assigned[self.members[index]].append((topic, partition))
        self.owner[topic][partition] = index
        self.load[index] += 1


class _Ladder:
    """One topic's subscribers sorted by load (ties by member number), with two windows:

    - the least loaded window at the bottom, filled one partition per member in turn; once every
      member in it got one, its level rises by one and it widens to the members now at that level;
    - the most loaded window at the top, drained the same way downwards; a member with nothing of
      the topic to give is dropped from it.

    The topic is balanced once the two levels are at most one apart. `load` is the builder's own
    list, so the windows see every partition the builder moves."""

    def __init__(self, load: list[int]) -> None:
        self.load = load
        self.order: list[int] = []

    def start(self, members: list[int]) -> int:
        """Sort `members` by load and reset both windows; returns the spread of their loads."""
        self.order = sorted(members, key=lambda m: (self.load[m], m))
        size = len(self.order)
        self.low_end, self.low_next = 0, 0             # the window is order[0:low_end]
        self.low_level = self.load[self.order[0]] - 1  # its level before anything is added
        self.high_start, self.high_end = size, size    # the window is order[high_start:high_end]
        self.high_next = size - 1
        self.high_level = self.load[self.order[-1]] + 1
        return self.load[self.order[-1]] - self.load[self.order[0]]

    def next_least_loaded(self) -> int:
        """The member to give the next partition to (at least one member is assumed)."""
        if self.low_next >= self.low_end:
            # everyone in the window got one: one level up, widened to the members at that level
            self.low_level += 1
            while self.low_end < len(self.order) and self.load[self.order[self.low_end]] == self.low_level:
                self.low_end += 1
            self.low_next = 0
        member = self.order[self.low_next]
        self.low_next += 1
        return member

    def next_most_loaded(self) -> int | None:
        """The member to take the next partition from, or None when nobody is left to give."""
        if self.high_next < self.high_start:
            if self.high_end <= self.high_start and self.high_start > 0:
                # every member of the window was dropped: restart from the next member down
                self.high_level = self.load[self.order[self.high_start - 1]]
            else:
                self.high_level -= 1
            while self.high_start > 0 and self.load[self.order[self.high_start - 1]] == self.high_level:
                self.high_start -= 1
            self.high_next = self.high_end - 1
        if self.high_next < 0:
            return None
        member = self.order[self.high_next]
        self.high_next -= 1
        return member

    def drop_last_most_loaded(self) -> None:
        """Take the member `next_most_loaded` just returned out of the top window for good."""
        dropped = self.high_next + 1
        last = self.high_end - 1
        self.order[dropped], self.order[last] = self.order[last], self.order[dropped]
        self.high_end -= 1

    def balanced(self) -> bool:
        return self.high_level - self.low_level <= 1
