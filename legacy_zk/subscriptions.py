"""zkclient's listener registry: the paths a member listens to, and how each is watched again.

0.8 subscribed its listeners through zkclient, which kept them for the life of the client
and re-installed a fired watch before telling the listener. Three moments re-watch a path:

  a notification   zkclient re-installs it with an exists and a read of the path (`reinstall`);
  a reconnect      the Java ZooKeeper client re-sent its watches with the last zxid it had seen,
                   and the server fired at once every watch whose node changed after that zxid,
                   even if it changed back (`rewatch_since`); kazoo forgets its watches instead;
  a new session    zkclient told every listener that something might have changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.exceptions import NoNodeError

from legacy_zk.watcher import Reason
from legacy_zk.zk import TracedZooKeeper, WatchHandler


@dataclass(frozen=True, kw_only=True)
class Subscription:
    path: str
    children: bool          # a child listener (subscribeChildChanges); else a data listener
    reason: Reason          # what a notification on it asks the watcher executor to do
    handler: WatchHandler

    def reinstall(self, zk: TracedZooKeeper) -> None:
        """zkclient before calling a listener: an exists-watch (covers a deleted node's return),
        then a read that sets the child or data watch."""
        if zk.exists(self.path, watch=self.handler) is None:
            return
        try:
            self._read(zk)
        except NoNodeError:
            pass  # deleted in between: the exists-watch covers its return

    def rewatch_since(self, zk: TracedZooKeeper, zxid: int) -> bool:
        """Watch again after a reconnect within the session; True when the server would have fired
        the re-sent watch: the node exists and its children (or data) changed after `zxid`. A
        missing node gets an exists-watch, which fires when it is created."""
        try:
            stat = self._read(zk)
        except NoNodeError:
            return zk.exists(self.path, watch=self.handler) is not None
        return (stat.pzxid if self.children else stat.mzxid) > zxid

    def _read(self, zk: TracedZooKeeper):
        if self.children:
            return zk.get_children_with_stat(self.path, watch=self.handler)[1]
        return zk.get(self.path, watch=self.handler)[1]
