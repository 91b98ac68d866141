"""The age rule of expiry.py, and the relationship between the defaults it rests on."""

from __future__ import annotations

import msgspec

from corral_actuator.admission import DEFAULT_MAX_CLOCK_SKEW
from corral_actuator.config import ActuatorConfig
from corral_actuator.expiry import DEFAULT_MAX_COMMAND_AGE, overage
from corral_actuator.kinds import EVENT, resolve_kind
from corral_engine_upgrade.core import DeciderConfig
from corral_engine_upgrade.service import EngineUpgradeConfig
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command

NOW = 1_800_000_000.0
VOLUME = resolve_kind("Volume")
assert VOLUME is not None


def command(created_at: float) -> Command:
    return new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace="longhorn-system", name="v"),
        changes=(FieldValue(path="/spec/image", value="new"),),
        preconditions=(FieldValue(path="/spec/image", value="old"),),
        created_at=created_at,
    )


def test_older_than_the_max_age_is_too_old() -> None:
    assert VOLUME is not None
    assert overage(command(NOW - 30.5), VOLUME, 30.0, NOW) == 30.5
    assert overage(command(NOW - 30.0), VOLUME, 30.0, NOW) is None  # exactly the max age: still fine
    assert overage(command(NOW - 1.0), VOLUME, 30.0, NOW) is None


def test_a_clock_ahead_of_ours_is_no_age() -> None:
    assert VOLUME is not None
    assert overage(command(NOW + 600.0), VOLUME, 30.0, NOW) is None


def test_no_created_at_no_events_no_limit() -> None:
    assert VOLUME is not None
    assert overage(command(0.0), VOLUME, 30.0, NOW) is None
    assert overage(command(-1.0), VOLUME, 30.0, NOW) is None
    assert overage(command(NOW - 3600.0), EVENT, 30.0, NOW) is None
    assert overage(command(NOW - 3600.0), VOLUME, 0.0, NOW) is None


def test_the_actuator_gives_up_well_before_engine_upgrade_does() -> None:
    """max age + clock-skew margin < command TTL, by default: a command is refused before its
    issuer stops counting it, with half a minute to spare for clocks that disagree; an issuer's
    clock further ahead than the allowance gets its commands refused at admission, so the
    allowance bounds the skew that can stretch a command's life."""
    actuator = msgspec.convert(
        {"service": "actuator", "instance": "a", "nats_url": "nats://x:4222"}, ActuatorConfig
    )
    engine_upgrade = msgspec.convert(
        {"service": "engine-upgrade", "instance": "e", "nats_url": "nats://x:4222"}, EngineUpgradeConfig
    )
    assert actuator.max_command_age_s == DEFAULT_MAX_COMMAND_AGE
    skew_margin = 30.0
    assert actuator.max_command_age_s + skew_margin <= engine_upgrade.command_ttl_s
    assert actuator.max_command_age_s + skew_margin <= DeciderConfig().timing.command_ttl
    assert actuator.max_clock_skew_s == DEFAULT_MAX_CLOCK_SKEW <= skew_margin
    assert actuator.max_command_age_s + actuator.max_clock_skew_s < engine_upgrade.command_ttl_s
