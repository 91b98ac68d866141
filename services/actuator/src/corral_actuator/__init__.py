"""corral actuator service."""
