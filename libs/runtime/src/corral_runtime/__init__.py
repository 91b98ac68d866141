"""What every corral service shares: config, logs, health, metrics, tracing, shutdown."""
