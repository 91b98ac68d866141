"""corral watcher service."""
