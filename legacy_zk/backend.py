"""The legacy backend's profile: Kafka 0.8's consumers, coordinating among themselves in ZooKeeper."""

from __future__ import annotations

from legacy_zk.config import STRATEGIES, LegacyConfig
from rebalance.backends import BackendProfile, Server
from rebalance.member import Member, MemberConfig


def _member_id(group: str, name: str) -> str:
    from legacy_zk.registry import consumer_id_string  # 0.8's `<group>_<consumer.id>`

    return consumer_id_string(group, name)


def _check(config: MemberConfig) -> None:
    LegacyConfig.from_member_config(config)


def _make(config: MemberConfig, **hooks) -> Member:
    from legacy_zk.member import LegacyMember

    return LegacyMember(config, **hooks)


PROFILE = BackendProfile(
    name="legacy",
    summary="Kafka 0.8's ZooKeeper rebalancer",
    needs_zookeeper=True,
    coordinator_in_brokers=False,
    connects_to=Server.ZOOKEEPER,
    strategies=STRATEGIES,
    settings_section="legacy",
    commits_carry_generation=False,    # 0.8 stored offsets in ZooKeeper with no generation to fence them
    member_id=_member_id,
    check=_check,
    make=_make,
)
