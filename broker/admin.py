"""Small admin helpers over kafka-python: create a topic and wait until every partition has a leader."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError


class TopicError(Exception):
    pass


class TopicExists(TopicError):
    pass


def create_topic(bootstrap: str, name: str, partitions: int, *, compacted: bool = False,
                 timeout_s: float = 30.0) -> None:
    """Create a topic (an existing one with that name is an error) and wait until it is usable."""
    configs = {"cleanup.policy": "compact"} if compacted else {}
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="rebalance-lab-admin",
                                 request_timeout_ms=int(timeout_s * 1000))
    except KafkaError as error:
        raise TopicError(f"no broker reachable at {bootstrap}: {error}") from error
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    except TopicAlreadyExistsError as error:
        raise TopicExists(f"topic {name!r} already exists") from error
    except KafkaError as error:
        raise TopicError(f"cannot create topic {name!r}: {error}") from error
    finally:
        admin.close()
    wait_for_topic(bootstrap, name, partitions, timeout_s=timeout_s)


def wait_for_topic(bootstrap: str, name: str, partitions: int, *, timeout_s: float = 30.0) -> None:
    """Until a broker reports the topic with every partition led (metadata is re-asked, with a deadline)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="rebalance-lab-admin")
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            found = consumer.partitions_for_topic(name) or set()
            if len(found) == partitions:
                return
            if time.monotonic() > deadline:
                raise TopicError(f"topic {name!r} has {len(found)}/{partitions} partitions after {timeout_s} s")
            consumer.topics()  # forces a metadata refresh
    finally:
        consumer.close()
