"""What every corral service shares: config, logs, health, metrics, tracing, leadership, shutdown.

A service's `__main__` calls `run_service(name, ConfigStruct, main)`; everything else here is what
`main(ctx)` finds on its `ServiceContext`.
"""

from corral_runtime.config import ConfigError, ServiceConfig, load_config
from corral_runtime.health import HealthServer, Readiness
from corral_runtime.leadership import Leadership
from corral_runtime.logs import Logger, configure_logging, get_logger
from corral_runtime.service import ServiceContext, ServiceMain, run_service, serve

__all__ = [
    "ConfigError",
    "HealthServer",
    "Leadership",
    "Logger",
    "Readiness",
    "ServiceConfig",
    "ServiceContext",
    "ServiceMain",
    "configure_logging",
    "get_logger",
    "load_config",
    "run_service",
    "serve",
]
