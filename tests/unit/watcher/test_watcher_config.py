"""The watcher's configuration from CORRAL_* variables."""

from __future__ import annotations

import pytest

from corral_model.kinds import KINDS
from corral_runtime import ConfigError, load_config
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import watch_settings


def test_defaults_watch_every_kind_with_a_ten_minute_resync() -> None:
    config = load_config(WatcherConfig, environ={})
    assert config.kinds == tuple(KINDS)
    settings = watch_settings(config)
    assert settings.resync_period == 600.0
    assert settings.namespace == "longhorn-system"


def test_kinds_namespace_and_timeouts_come_from_the_environment() -> None:
    config = load_config(
        WatcherConfig,
        environ={
            "CORRAL_KINDS": "volume, engine",
            "CORRAL_NAMESPACE": "lh",
            "CORRAL_RESYNC_PERIOD_S": "30",
            "CORRAL_INACTIVITY_TIMEOUT_S": "5",
            "CORRAL_KUBECONFIG": "/tmp/kc",
        },
    )
    assert config.kinds == ("volume", "engine")
    assert config.kubeconfig == "/tmp/kc"
    settings = watch_settings(config)
    assert (settings.namespace, settings.resync_period, settings.inactivity_timeout) == ("lh", 30.0, 5.0)


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        load_config(WatcherConfig, environ={"CORRAL_KINDS": "volume,bogus"})


def test_a_non_positive_resync_period_is_refused() -> None:
    with pytest.raises(ConfigError, match="CORRAL_RESYNC_PERIOD_S"):
        load_config(WatcherConfig, environ={"CORRAL_RESYNC_PERIOD_S": "0"})
