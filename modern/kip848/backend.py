"""The kip848 backend's profile: KIP-848's consumer group protocol, its coordinator inside the brokers."""

from __future__ import annotations

from modern.kip848.client_settings import STRATEGIES, broker_heartbeat_interval_ms
from rebalance.backends import BackendProfile, GroupProtocol, Server
from rebalance.member import MemberConfig


def _settings_check(config: MemberConfig) -> None:
    from modern.kip848.client_settings import settings_from

    settings_from(config, client_id=config.member_name or "check")


def _broker_env(session_timeout_ms: int, settings: dict[str, object]) -> dict[str, str]:
    """The session and heartbeat interval are the coordinator's in KIP-848: the brokers get the scenario's."""
    return {"REBALANCE_LAB_GROUP_CONSUMER_SESSION_TIMEOUT_MS": str(session_timeout_ms),
            "REBALANCE_LAB_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS":
                str(broker_heartbeat_interval_ms(session_timeout_ms, settings))}


PROFILE = BackendProfile(
    name="kip848", summary="KIP-848's consumer group protocol (ConsumerGroupHeartbeat)",
    group_protocol=GroupProtocol.CONSUMER, strategies=STRATEGIES, needs_zookeeper=False, coordinator_in_brokers=True, connects_to=Server.BROKERS,
    member_id=lambda group, name: name,   # its client.id, as classic's; the coordinator's id is a UUID it makes
    id_setting="client.id",
    commits_carry_generation=True,   # OffsetCommit v9 is fenced by the member epoch
    check=_settings_check, member_class="modern.kip848.member:Kip848Member", broker_env=_broker_env,
    herd_cost_terms=("moved", "1"),   # only members whose target changed do more than heartbeat
    # group.consumer.assignors defaults to [uniform, range]: a member that names none gets the first, uniform
    default_strategy="uniform",
    colour="#2ca02c", marker="^", column=2,
)
