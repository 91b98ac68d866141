"""corral setting-sync service."""
