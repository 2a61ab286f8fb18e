"""The kip848 backend's profile: KIP-848's consumer group protocol, its coordinator inside the brokers."""

from __future__ import annotations

from collections.abc import Mapping

from modern.kip848.client_settings import STRATEGIES, server_assignor
from rebalance.backends import BackendProfile, GroupProtocol, Server
from rebalance.consumer_group_timing import SETTINGS, ConsumerGroupTiming, broker_env_name
from rebalance.member import MemberConfig


def _settings_check(config: MemberConfig) -> None:
    from modern.kip848.client_settings import settings_from

    settings_from(config, client_id=config.member_name or "check")


def _broker_timing(settings: Mapping[str, object]) -> ConsumerGroupTiming:
    """The consumer-group session and heartbeat the brokers run with: Kafka 4's defaults (45 s, 5 s) but for
    what [group.kip848] sets under Kafka's names, checked as Kafka's broker checks them."""
    return ConsumerGroupTiming.from_settings(settings)


def _broker_env(classic_session_ms: int, settings: Mapping[str, object]) -> dict[str, str]:
    """The brokers get the group.consumer.* settings [group.kip848] gives, and nothing else: the scenario's
    `session_timeout_ms` (`classic_session_ms`) is a classic client's setting, and KIP-848's session is the
    broker's, 45 s unless an operator lowers it together with its minimum."""
    _broker_timing(settings)
    return {broker_env_name(name): str(value) for name, value in settings.items() if name in SETTINGS}


def _session_ms(classic_session_ms: int, settings: Mapping[str, object]) -> int:
    return _broker_timing(settings).session_timeout_ms


PROFILE = BackendProfile(
    name="kip848", summary="KIP-848's consumer group protocol (ConsumerGroupHeartbeat)",
    group_protocol=GroupProtocol.CONSUMER, strategies=STRATEGIES, needs_zookeeper=False, coordinator_in_brokers=True, connects_to=Server.BROKERS,
    member_id=lambda group, name: name,   # its client.id, as classic's; the coordinator's id is a UUID it makes
    id_setting="client.id",
    commits_carry_generation=True,   # OffsetCommit v9 is fenced by the member epoch
    check=_settings_check, member_class="modern.kip848.member:Kip848Member", broker_env=_broker_env,
    session_ms=_session_ms,   # the brokers' consumer-group session, not the scenario's classic one
    herd_cost_terms=("moved", "1"),   # only members whose target changed do more than heartbeat
    # group.consumer.assignors defaults to [uniform, range]: a member that names none gets the first, uniform
    default_strategy="uniform",
    runs_as=lambda strategy: server_assignor(strategy) if strategy in STRATEGIES else strategy,
    colour="#2ca02c", marker="^", column=2,
)
