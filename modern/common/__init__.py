"""What the clients and the coordinator both say on the wire: Kafka's error codes and the ConsumerGroupHeartbeat/Describe messages with their schemas."""
