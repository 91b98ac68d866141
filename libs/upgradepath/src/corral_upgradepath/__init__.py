"""The upgrade-path gate: semver rules deciding whether this build may run against the cluster."""
