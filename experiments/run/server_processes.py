"""The run's servers: ZooKeeper (when the cluster has it) and the brokers, started in the setup phase and
stopped in the teardown, with the scenario's topics, the servers' addresses and the witness that reads their
own counters (experiments.run.witness). The runner holds one (`Run.server_processes`) and starts the members'
proxies between ZooKeeper and the brokers, since the brokers read the proxies' advertise map when they start;
the servers' faults are experiments.faults.server's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.run.member_configs import native_settings
from experiments.run.witness import BrokerWitness, ZooKeeperWitness
from experiments.scenario import Scenario
from rebalance.backends import BackendProfile


class ServerProcesses:
    """ZooKeeper and the brokers of one run; `check_abort` raises when the run is ended, between the steps."""

    def __init__(self, scenario: Scenario, profile: BackendProfile, folder: RunFolder, *, run_id: str,
                 zk_provider: str, check_abort: Callable[[], None]) -> None:
        self.scenario = scenario
        self.profile = profile
        self.folder = folder
        self.run_id = run_id
        self.zk_provider = zk_provider
        self.check_abort = check_abort
        self.ensemble = None
        self.zk_connect: str | None = None    # with the run's chroot
        self.cluster = None

    async def start_zookeeper(self) -> None:
        nodes = self.scenario.cluster.zookeeper_nodes
        if nodes:
            import zkensemble

            self.ensemble = await asyncio.to_thread(zkensemble.start, nodes=nodes, provider=self.zk_provider,
                                                    owner_pid=os.getpid())
            self.zk_connect = self.ensemble.chroot(f"run-{self.run_id}")
            self.check_abort()

    async def start_brokers(self, advertise_map: Path) -> None:
        from broker.cluster import FailoverTiming, start_cluster

        cluster = self.scenario.cluster
        failover = FailoverTiming(broker_session_timeout_ms=cluster.broker_session_timeout_ms,
                                  fail_back_delay_ms=cluster.fail_back_delay_ms,
                                  coordinator_load_delay_ms=cluster.coordinator_load_delay_ms)
        self.cluster = await asyncio.to_thread(
            start_cluster, cluster.brokers, zk=self.zk_connect if self.profile.needs_zookeeper else None,
            data_dir=self.folder.broker_data, log_dir=self.folder.logs,
            advertise_map=advertise_map, coordinator=self.profile.coordinator_in_brokers,
            failover=failover, env=self.profile.broker_env(self.scenario.group.session_timeout_ms,
                                                           native_settings(self.scenario, self.profile)),
            events_dir=self.folder.events, run_id=self.run_id,   # each broker's own liveness (the server-stall check)
        )

    def witness(self) -> BrokerWitness | ZooKeeperWitness | None:
        """Who counts the group's requests: the brokers when they host the coordinator, else ZooKeeper."""
        if self.profile.coordinator_in_brokers:
            return BrokerWitness(lambda: [self.broker_address(i) for i, broker in
                                          enumerate(self.cluster.brokers) if broker.alive])
        if self.ensemble is not None:
            return ZooKeeperWitness(lambda: [self.zk_address(i) for i in range(len(self.ensemble.nodes))])
        return None

    async def create_topics(self) -> None:
        from broker.admin import create_topic

        for topic in self.scenario.topics:
            await asyncio.to_thread(create_topic, self.cluster.bootstrap, topic.name, topic.partitions)
            self.check_abort()

    def zk_address(self, index: int) -> tuple[str, int]:
        host, _, port = self.ensemble.nodes[index].client_address.rpartition(":")
        return host, int(port)

    def broker_address(self, index: int) -> tuple[str, int]:
        broker = self.cluster.brokers[index]
        return broker.host, broker.port

    async def stop(self, note: Callable[[str], None]) -> None:
        """The brokers, then ZooKeeper; a server that fails to stop is noted and the other still stopped."""
        if self.cluster is not None:
            try:
                await asyncio.to_thread(self.cluster.stop)
            except Exception as error:  # noqa: BLE001 - keep tearing down
                note(f"stopping the brokers failed: {error!r}")
        if self.ensemble is not None:
            try:
                await asyncio.to_thread(self.ensemble.stop)
            except Exception as error:  # noqa: BLE001
                note(f"stopping ZooKeeper failed: {error!r}")
