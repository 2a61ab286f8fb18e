"""The modern backend's profile: the classic group protocol, with its coordinator inside the brokers."""

from __future__ import annotations

from rebalance.backends import BackendProfile, Server
from rebalance.member import Member, MemberConfig

# The Kafka client strategies a member may name in JoinGroup.
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


def _member_id(group: str, name: str) -> str:
    return name   # the member's client.id; the coordinator's member id is not known before it joins


def _check(config: MemberConfig) -> None:
    from modern.member import settings_from

    settings_from(config, client_id=config.member_name or "check")


def _make(config: MemberConfig, **hooks) -> Member:
    from modern.member import ModernMember

    return ModernMember(config, **hooks)


PROFILE = BackendProfile(
    name="modern",
    summary="the classic coordinator protocol",
    needs_zookeeper=False,
    coordinator_in_brokers=True,
    connects_to=Server.BROKERS,
    strategies=STRATEGIES,
    settings_section="modern",
    commits_carry_generation=True,     # OffsetCommit is fenced by the generation
    member_id=_member_id,
    check=_check,
    make=_make,
)
