"""What the clients and the coordinator share on the wire: connection, error codes, traced requests, coordinator lookup, fetched batches, ConsumerGroupHeartbeat/Describe."""
