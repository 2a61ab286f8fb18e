"""The group coordinator inside the broker, for classic and consumer groups alike (Kafka's group-coordinator module)."""
