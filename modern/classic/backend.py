"""The classic backend's profile: Kafka's classic group protocol, its coordinator inside the brokers.

Its earlier name, `modern`, is an alias (rebalance.backends)."""

from __future__ import annotations

from rebalance.backends import BackendProfile, GroupProtocol, Server
from rebalance.member import MemberConfig

# The Kafka client strategies a member may name in JoinGroup.
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


def _settings_check(config: MemberConfig) -> None:
    from modern.classic.member import settings_from

    settings_from(config, client_id=config.member_name or "check")


PROFILE = BackendProfile(
    name="classic", summary="Kafka's classic group protocol (JoinGroup, SyncGroup)", strategies=STRATEGIES,
    group_protocol=GroupProtocol.CLASSIC, needs_zookeeper=False, coordinator_in_brokers=True, connects_to=Server.BROKERS,
    member_id=lambda group, name: name,   # its client.id: the coordinator's member id is given only at join
    id_setting="client.id",
    commits_carry_generation=True,   # OffsetCommit is fenced by the generation
    check=_settings_check, member_class="modern.classic.member:ModernMember",
    # 3.x's partition.assignment.strategy default is [range, cooperative-sticky]: the group's vote takes the
    # first that every member lists, range (ConsumerConfig, AbstractCoordinator's protocol selection)
    default_strategy="range",
    herd_cost_terms=("N", "1"),   # every member rejoins and syncs: the group-wide barrier
    colour="#1f77b4", marker="s", column=1,
)
