"""corral v2-upgrade service."""
