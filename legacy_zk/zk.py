"""The member's one door to ZooKeeper: every request is timed and written as an event.

0.8 talked to ZooKeeper through zkclient, whose `retryUntilConnected` made every call
block while disconnected and retry after ConnectionLoss or SessionExpired, once connected
again (in a new session, if the old one expired). The same here: a request that fails
that way, or that kazoo silently dropped when the session expired, is retried when the
client is connected again; only closing the client ends the wait. Each try is its own
`coordination_request` event. A retried create may meet its own earlier success as
NodeExists, which is why owner claims accept "exists with my own data". A member cut off
from ZooKeeper therefore blocks in its next ZooKeeper call, and makes it once the link is
back: the zombie's late commit.

The connection is retried at most a second apart, as the Java client did (kazoo's own backoff
grows to an hour), so a member whose link comes back reconnects about as soon as 0.8's would.

Watch callbacks are wrapped too: a real notification (not kazoo's "connection dropped,
watch forgotten" signal) becomes a `watch_notification` event before the handler runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NodeExistsError, SessionExpiredError
from kazoo.protocol.connection import _CONNECTION_DROP
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from rebalance import events as ev

Emit = Callable[..., object]
WatchHandler = Callable[[str, str], None]  # (path, event type name)

_WAIT_SLICE_S = 0.2
RECONNECT_BACKOFF_CAP_S = 1.0


def reconnect_retry() -> KazooRetry:
    """Retry the connection forever, 0.1 s, 0.2 s, ... apart, never more than a second."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.0, max_delay=RECONNECT_BACKOFF_CAP_S)


def error_name(error: BaseException) -> str:
    """ZooKeeper's own spelling: NodeExistsError -> NodeExists."""
    return type(error).__name__.removesuffix("Error").removesuffix("Exception") or type(error).__name__


class TracedZooKeeper:
    def __init__(self, connect: str, *, session_timeout_ms: int, emit: Emit) -> None:
        self.reconnect_retry = reconnect_retry()
        self.client = KazooClient(
            hosts=connect, timeout=session_timeout_ms / 1000.0, connection_retry=self.reconnect_retry
        )
        self._emit = emit
        self._closed = threading.Event()
        self._sessions_lost = 0  # bumped on LOST; a request sent before it will never be answered
        self._lock = threading.Lock()
        self._watch_wrappers: dict[tuple, Callable] = {}
        self.requests = 0
        self.notifications = 0
        self._connected = threading.Event()
        self._started = False
        self.client.add_listener(self._track_session)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout_s: float) -> None:
        """Open the session (once: a member connected ahead of its join starts without a second look)."""
        if self._started:
            return
        self._started = True
        self.client.start(timeout=timeout_s)
        if self.client.connected:
            self._connected.set()
        if self.client.chroot:  # a fresh chroot ("host:port/lab") exists only once someone creates it
            self._call("ensure_path", self.client.chroot, self.client.ensure_path_async, "/")

    def stop(self) -> None:
        self._closed.set()
        try:
            self.client.stop()
        finally:
            self.client.close()

    def abandon(self, timeout_s: float = 10.0) -> None:
        """Drop the connection without closeSession, as a killed process would: the session lives
        on in the server until it expires. kazoo's own test hook drops the socket, and the client
        is marked stopped first, so it never reconnects."""
        self._closed.set()
        client = self.client
        client._stopped.set()
        client._queue.append((_CONNECTION_DROP, None))
        try:
            client._connection._write_sock.send(b"\0")
        except (OSError, AttributeError):
            pass
        client._connection.stop(timeout_s)
        client.handler.stop()

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self.client.add_listener(listener)

    @property
    def session_id(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    @property
    def last_zxid(self) -> int:
        """The newest transaction this client has seen (what the Java client re-sent its watches with)."""
        return self.client.last_zxid

    @property
    def connected(self) -> bool:
        return self.client.state == KazooState.CONNECTED

    def _track_session(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
            return
        self._connected.clear()
        if state == KazooState.LOST:
            with self._lock:
                self._sessions_lost += 1

    # -- requests ------------------------------------------------------------------------------------

    def get(self, path: str, watch: WatchHandler | None = None) -> tuple[bytes, ZnodeStat]:
        return self._call("get", path, self.client.get_async, path, watch=self._wrap(watch, path))

    def get_children(self, path: str, watch: WatchHandler | None = None) -> list[str]:
        """Children sorted as strings: ZooKeeper returns them in no promised order."""
        children = self._call(
            "get_children", path, self.client.get_children_async, path, watch=self._wrap(watch, path)
        )
        return sorted(children)

    def get_children_with_stat(self, path: str, watch: WatchHandler | None = None) -> tuple[list[str], ZnodeStat]:
        children, stat = self._call(
            "get_children", path, self.client.get_children_async, path, watch=self._wrap(watch, path),
            include_data=True,
        )
        return sorted(children), stat

    def exists(self, path: str, watch: WatchHandler | None = None) -> ZnodeStat | None:
        return self._call("exists", path, self.client.exists_async, path, watch=self._wrap(watch, path))

    def create(self, path: str, value: bytes, *, ephemeral: bool = False) -> str:
        return self._call("create", path, self.client.create_async, path, value, ephemeral=ephemeral)

    def set(self, path: str, value: bytes) -> ZnodeStat:
        return self._call("set", path, self.client.set_async, path, value)

    def delete(self, path: str) -> None:
        self._call("delete", path, self.client.delete_async, path)

    def ensure_path(self, path: str) -> None:
        """Persistent parents, one traced exists/create per missing level (as zkclient did)."""
        if path in ("", "/") or self.exists(path) is not None:
            return
        self.ensure_path(path.rsplit("/", 1)[0])
        try:
            self.create(path, b"")
        except NodeExistsError:
            pass

    def _call(self, op: str, path: str, start: Callable, *args, **kwargs):
        """One request, retried like zkclient's retryUntilConnected."""
        while True:
            try:
                return self._try(op, path, start, *args, **kwargs)
            except (ConnectionLoss, SessionExpiredError):
                self._wait_connected()

    def _wait_connected(self) -> None:
        while not self._connected.wait(_WAIT_SLICE_S):
            if self._closed.is_set():
                raise ConnectionClosedError("client closing")

    def _try(self, op: str, path: str, start: Callable, *args, **kwargs):
        self._wait_connected()
        with self._lock:
            sessions_lost = self._sessions_lost
        began = time.monotonic_ns()
        error: BaseException | None = None
        try:
            result = start(*args, **kwargs)
            while not result.wait(_WAIT_SLICE_S):
                if self._closed.is_set():
                    raise ConnectionClosedError("client closing")
                with self._lock:
                    if self._sessions_lost != sessions_lost:  # kazoo dropped it with the old session
                        raise SessionExpiredError("session expired while the request waited")
            return result.get()
        except Exception as caught:
            error = caught
            raise
        finally:
            with self._lock:
                self.requests += 1
            self._emit(
                ev.COORDINATION_REQUEST,
                op=op,
                path=path,
                latency_ms=round((time.monotonic_ns() - began) / 1e6, 3),
                error=error_name(error) if error is not None else None,
            )

    # -- watches -------------------------------------------------------------------------------------

    def _wrap(self, handler: WatchHandler | None, path: str) -> Callable | None:
        """One wrapper per (handler, path), so kazoo (which keeps a set per path) registers it once."""
        if handler is None:
            return None
        key = (handler, path)
        with self._lock:
            wrapper = self._watch_wrappers.get(key)
            if wrapper is None:
                wrapper = self._watch_wrappers[key] = _Notifier(self, handler)
        return wrapper

    def _notified(self, event: WatchedEvent, handler: WatchHandler) -> None:
        if event.type == EventType.NONE:
            return  # kazoo dropping its watches on a disconnect: not a notification from the server
        with self._lock:
            self.notifications += 1
        self._emit(ev.WATCH_NOTIFICATION, path=event.path, event=event.type)
        handler(event.path, event.type)


class _Notifier:
    """A kazoo watch callback that reports the notification, then calls a handler that never blocks."""

    def __init__(self, zk: TracedZooKeeper, handler: WatchHandler) -> None:
        self._zk = zk
        self._handler = handler

    def __call__(self, event: WatchedEvent) -> None:
        self._zk._notified(event, self._handler)
