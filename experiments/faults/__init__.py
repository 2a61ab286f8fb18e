"""Fault injection, the same for every backend: link faults through TCP proxies, process faults
through signals, server faults through the ZooKeeper ensemble and the broker cluster."""
