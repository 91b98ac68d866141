"""The `corral run` demo: a Longhorn upgrade's new engine image arrives in the sandbox cluster and
the engine-upgrade wave it starts is shown live (`engine_wave` acts on the cluster, `show` runs it
beside the supervisor)."""
