"""The classic consumer group client (Kafka's ConsumerCoordinator and AbstractCoordinator), the `modern` backend."""
