"""The clients' blocking broker connection (modern/client/connection.py) against the lab's broker."""

from __future__ import annotations

import threading

from kafka.protocol.metadata import MetadataRequest

from modern.client.connection import BrokerConnection, parse_address


def test_a_request_after_an_abort_opens_a_new_socket_even_when_the_aborted_exchange_had_finished(broker):
    """A member's close aborts its connections to wake the heartbeat thread, then sends LeaveGroup. When the
    heartbeat under way had already read its answer, the abort could only shut the socket down; the LeaveGroup
    must still go out (on a broken pipe the group waits out the member's whole session)."""
    connection = BrokerConnection(*parse_address(broker.bootstrap), client_id="t", timeout_s=10)
    assert connection.request(MetadataRequest[0](topics=[])).brokers
    with connection._lock:            # another thread's exchange holds the connection: abort cannot close it
        aborter = threading.Thread(target=connection.abort)
        aborter.start()
        aborter.join()
    assert connection.request(MetadataRequest[0](topics=[])).brokers
    connection.close()
