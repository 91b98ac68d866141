"""NATS JetStream plumbing: streams, pipelined publish, pull consumers, dead letters, leases, bootstrap."""
