"""Kafka's group protocols after ZooKeeper: the coordinator (`coordinator/`), the classic client (`classic/`), the KIP-848 client (`kip848/`) and what they share (`common/`)."""
