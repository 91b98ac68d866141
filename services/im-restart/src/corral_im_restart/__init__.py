"""corral im-restart service."""
