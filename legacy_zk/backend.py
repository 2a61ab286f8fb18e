"""The legacy backend's profile: Kafka 0.8's consumers, coordinating among themselves in ZooKeeper."""

from __future__ import annotations

from legacy_zk.config import STRATEGIES, LegacyConfig
from rebalance.backends import BackendProfile, Server
from rebalance.member import MemberConfig


def _consumer_id(group: str, name: str) -> str:
    from legacy_zk.registry import consumer_id_string  # 0.8's `<group>_<consumer.id>`

    return consumer_id_string(group, name)


def _check(config: MemberConfig) -> None:
    LegacyConfig.from_member_config(config)


PROFILE = BackendProfile(
    name="legacy", summary="Kafka 0.8's ZooKeeper rebalancer", strategies=STRATEGIES, group_protocol=None,
    needs_zookeeper=True, coordinator_in_brokers=False, connects_to=Server.ZOOKEEPER, member_id=_consumer_id,
    id_setting="consumer.id",
    commits_carry_generation=False,   # 0.8 kept offsets in ZooKeeper, with no generation to fence them
    # 0.8's application took one message at a time from a ConsumerIterator and left commits to auto-commit:
    # ZookeeperConsumerConnector's scheduled autoCommit and the commit in closeFetchersForQueues before a
    # rebalance releases its partitions (docs/legacy.md, "Commits")
    commits_after_batch=False,
    check=_check, member_class="legacy_zk.member:LegacyMember",
    default_strategy="range",   # 0.8's partition.assignment.strategy default
    # every member reads every registration (N x N), claims, releases and reads offsets per partition (P)
    herd_cost_terms=("N2", "N", "P", "1"),
    colour="#d62728", marker="o", column=0,
)
