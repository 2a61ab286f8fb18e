"""KIP-848's consumer group protocol (`group.protocol=consumer`), the coordinator side."""
