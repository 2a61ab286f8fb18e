"""The peer links' one departure from a direct dial: a target that is not listening yet."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rebalance.ports import free_port
from zkensemble.linkproxy import DIAL_PATIENCE_S, LinkProxies


def _echo_once(listener: socket.socket) -> None:
    connection, _ = listener.accept()
    with connection:
        connection.sendall(connection.recv(64).upper())


@pytest.fixture
def links():
    proxies = LinkProxies()
    yield proxies
    proxies.close()


def test_a_target_that_starts_listening_just_after_the_dial_gets_the_connection(links):
    # A new ZooKeeper leader binds its learner port a moment after its followers learn of it.
    target = free_port()
    port = links.add("1->2/quorum", target)
    caller = socket.create_connection(("127.0.0.1", port), timeout=5)
    time.sleep(0.3)
    listener = socket.create_server(("127.0.0.1", target))
    server = threading.Thread(target=_echo_once, args=(listener,), daemon=True)
    server.start()
    with caller, listener:
        caller.sendall(b"hello")
        assert caller.recv(64) == b"HELLO"
    server.join(timeout=5)


def test_a_target_that_never_listens_closes_the_callers_connection_after_the_patience(links):
    port = links.add("1->2/quorum", free_port())
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=DIAL_PATIENCE_S + 5) as caller:
        try:
            assert caller.recv(64) == b""
        except ConnectionResetError:
            pass
    assert DIAL_PATIENCE_S <= time.monotonic() - started < DIAL_PATIENCE_S + 3
