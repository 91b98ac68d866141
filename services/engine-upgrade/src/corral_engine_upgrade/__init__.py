"""corral engine-upgrade service."""
