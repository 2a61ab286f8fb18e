"""The KIP-848 consumer (`group.protocol=consumer`): heartbeats and reconciliation, the `kip848` backend."""
