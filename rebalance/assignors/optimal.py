"""The optimal baseline: the fewest moves that reach a most-balanced assignment, as a min-cost flow.

"Most balanced" means the smallest sum of squared member loads. With identical
subscriptions that is exactly "every member has floor(P/N) or ceil(P/N)"; with unequal
ones it is the assignment that also minimises the largest load. A "move" is a partition
whose trusted previous owner (see ownership.py) ends up without it.

The flow network. Partitions that nobody can tell apart are one node: same set of
possible members (their topic's subscribers) and same previous owner. Such a class sends
its partitions either straight to its owner (cost 0: kept) or into a pool for its
subscriber set (cost 1: moved; 0 if it had no owner), and the pool feeds any member of
the set. With identical subscriptions each member drains into the sink with capacity
floor(P/N), plus one shared "extra" node taking P % N more: every feasible flow is balanced.
Otherwise each member drains through unit edges costing W*(2k-1) for its k-th partition
(the growth of k^2), with W larger than any possible number of moves, so balance always
wins over stickiness. networkx's network simplex solves it exactly.

Size limit: networkx's simplex is pure Python and takes roughly nodes x edges steps, so
the limit is time: networks above `MAX_FLOW_WORK` (10^8 nodes x edges) are refused with a
ValueError rather than left running for minutes. With identical subscriptions the network
has about 2N nodes and 4N edges (1,000 members x 10,000 partitions: about a second;
the limit is near 5,000 members); unequal subscriptions add about N edges per distinct
subscriber set and one per unit of member load. benchmarks/bench_assignors.py prints the
figures.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, replace

from rebalance.assignors.base import Assignor, Group, Plan
from rebalance.assignors.ownership import resolve_ownership
from rebalance.types import TopicPartition

# networkx's network simplex takes roughly nodes x edges steps: about 10^8 is 10-40 s here.
MAX_FLOW_WORK = 100_000_000


@dataclass(frozen=True)
class OptimalSolution:
    assignment: dict[str, list[TopicPartition]]
    moves: int              # partitions taken from their trusted previous owner
    load_squares: int       # sum of squared loads: the balance the solution reached
    flow_nodes: int = 0     # size of the network that was solved
    flow_edges: int = 0


class OptimalAssignor(Assignor):
    """Not a Kafka assignor: the lower bound on movement that sticky assignors are scored against."""

    name = "optimal"

    def plan(self, group: Group) -> Plan:
        return solve_optimal(group).assignment


def solve_optimal(group: Group) -> OptimalSolution:
    owner = resolve_ownership(group).owner_of()
    # Only an owner still subscribed to the topic can keep a partition.
    keeper = {tp: m for tp, m in owner.items() if tp.topic in group.topics_of(m)}
    subscriber_sets = {t: frozenset(ms) for t, ms in group.subscribers.items()}

    # Partition classes: (subscriber set, previous owner who may keep it, or None) -> partitions.
    classes: dict[tuple[frozenset[str], str | None], list[TopicPartition]] = defaultdict(list)
    for tp in group.all_partitions:
        classes[(subscriber_sets[tp.topic], keeper.get(tp))].append(tp)

    total = len(group.all_partitions)
    quota_shape = group.identical_subscriptions  # the balanced shape is known: floor or ceil each
    caps = {} if quota_shape else _load_caps(group, classes)
    pools = {s: ("pool", i) for i, s in enumerate(sorted(set(subscriber_sets.values()), key=sorted))}
    # Classes in a fixed order too: by subscriber set, then previous owner.
    classes = dict(sorted(classes.items(), key=lambda item: (sorted(item[0][0]), item[0][1] or "")))
    sink_edges = 2 * len(group.members) + 1 if quota_shape else sum(caps.values())
    edge_count = 2 * len(classes) + sum(len(s) for s in pools) + sink_edges
    node_count = len(classes) + len(pools) + len(group.members) + 2
    if node_count * edge_count > MAX_FLOW_WORK:
        raise ValueError(
            f"group too large for the optimal solver: {node_count:,} nodes x {edge_count:,} edges "
            f"exceeds {MAX_FLOW_WORK:,} (networkx's simplex would take minutes)"
        )

    # Imported here, not at the top: every member process imports the assignors, and only this solver
    # needs networkx (about a second of CPU to import).
    import networkx as nx

    graph = nx.MultiDiGraph()
    graph.add_node("sink", demand=total)
    for index, ((members, previous), partitions) in enumerate(classes.items()):
        node = ("class", index)
        graph.add_node(node, demand=-len(partitions))
        # Moving costs 1; a partition nobody may keep costs the same wherever it goes.
        graph.add_edge(node, pools[members], weight=0 if previous is None else 1)
        if previous is not None:
            graph.add_edge(node, ("member", previous), weight=0)
    for members, pool in pools.items():
        for member in group.members:  # member order, so the read-out below is deterministic
            if member in members:
                graph.add_edge(pool, ("member", member), weight=0)
    if quota_shape:
        # Capacities add up to exactly P, so any feasible flow is balanced: floor(P/N) for
        # everyone, and one more for P % N members through the shared "extra" node.
        floor, extra = divmod(total, len(group.members))
        graph.add_edge("extra", "sink", capacity=extra, weight=0)
        for member in group.members:
            graph.add_edge(("member", member), "sink", capacity=floor, weight=0)
            graph.add_edge(("member", member), "extra", capacity=1, weight=0)
    else:
        # Convex costs: the k-th partition of a member costs W*(2k-1), the growth of k^2.
        weight = total + 1
        for member in group.members:
            for k in range(1, caps[member] + 1):
                graph.add_edge(("member", member), "sink", capacity=1, weight=weight * (2 * k - 1))

    flow = nx.min_cost_flow(graph)
    solution = _read_solution(group, classes, pools, flow, owner)
    return replace(solution, flow_nodes=graph.number_of_nodes(), flow_edges=graph.number_of_edges())


def _load_caps(group: Group, classes: dict) -> dict[str, int]:
    """An upper bound on each member's load in a most-balanced assignment.

    A greedy fill (scarcest partitions first, each to the least-loaded candidate) gives a
    feasible assignment; the most balanced one has no larger maximum load.
    """
    load = dict.fromkeys(group.members, 0)
    by_set: dict[frozenset[str], int] = defaultdict(int)
    for (members, _), partitions in classes.items():
        by_set[members] += len(partitions)
    for members, count in sorted(by_set.items(), key=lambda item: (len(item[0]), sorted(item[0]))):
        heap = [(load[m], m) for m in members]
        heapq.heapify(heap)
        for _ in range(count):
            current, member = heapq.heappop(heap)
            load[member] = current + 1
            heapq.heappush(heap, (current + 1, member))
    ceiling = max(load.values(), default=0)
    eligible = {m: sum(group.partitions_per_topic[t] for t in group.topics_of(m)) for m in group.members}
    return {m: min(ceiling, eligible[m]) for m in group.members}


def _read_solution(group, classes, pools, flow, owner) -> OptimalSolution:
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in group.members}
    pooled: dict[tuple, list[TopicPartition]] = defaultdict(list)
    for index, ((members, previous), partitions) in enumerate(classes.items()):
        kept = 0
        if previous is not None:
            kept = sum(flow[("class", index)].get(("member", previous), {}).values())
            assignment[previous].extend(partitions[:kept])
        pooled[pools[members]].extend(partitions[kept:])
    for pool, partitions in pooled.items():
        for (_, member), by_key in flow[pool].items():
            count = sum(by_key.values())
            assignment[member].extend(partitions[:count])
            del partitions[:count]
    holder = {tp: member for member, tps in assignment.items() for tp in tps}
    moves = sum(1 for tp, member in owner.items() if holder.get(tp) != member)
    squares = sum(len(tps) ** 2 for tps in assignment.values())
    return OptimalSolution(assignment, moves, squares)
