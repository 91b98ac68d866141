"""The runner's small pure parts: subjects, configuration from the environment, the policy file lookup."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from corral_actuator.addressing import id_mismatch, subject_mismatch, subject_service
from corral_actuator.config import ActuatorConfig, policy_file
from corral_actuator.limiter import TokenBucket, Unlimited, rate_limiter
from corral_actuator.runner import consumer_spec, result_subject_for
from corral_model.envelopes import CommandResult, FieldValue, Outcome, Target, Verb, as_attempt, new_command
from corral_runtime.config import ConfigError, load_config


def test_subject_service_names_the_publisher() -> None:
    assert subject_service("lh.cmd.engine-upgrade.volume.longhorn-system.pvc-1") == "engine-upgrade"
    assert subject_service("lh.cmd.a%2Eb.volume.ns.n") == "a.b"
    assert subject_service("lh.res.engine-upgrade.volume.ns.n") is None


def test_subject_and_payload_must_name_the_same_service_and_object() -> None:
    command = new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace="longhorn-system", name="pvc.1"),
        changes=(FieldValue(path="/spec/image", value="i"),),
    )
    assert subject_mismatch("lh.cmd.engine-upgrade.volume.longhorn-system.pvc%2E1", command) is None
    assert subject_mismatch("lh.cmd.engine-upgrade.Volume.longhorn-system.pvc%2E1", command) is None
    assert subject_mismatch("lh.cmd.im-restart.volume.longhorn-system.pvc%2E1", command) == (
        "subject and payload disagree:"
        " service 'im-restart' in the subject but 'engine-upgrade' in the payload"
    )
    both = subject_mismatch("lh.cmd.engine-upgrade.pod.longhorn-system.other", command)
    assert both is not None and "kind 'pod'" in both and "name 'other' in the subject but 'pvc.1'" in both
    namespace = subject_mismatch("lh.cmd.engine-upgrade.volume.default.pvc%2E1", command)
    assert namespace is not None and "namespace 'default'" in namespace
    for short in ("lh.cmd.engine-upgrade.volume.longhorn-system", "lh.res.engine-upgrade.volume.ns.n"):
        reason = subject_mismatch(short, command)
        assert reason is not None and "not a command subject" in reason


def test_the_id_must_be_the_hash_of_the_content() -> None:
    command = new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace="longhorn-system", name="v"),
        changes=(FieldValue(path="/spec/image", value="i"),),
        created_at=1.0,
        term=3,
    )
    assert id_mismatch(command) is None
    # Date, term and reason are not the decision: changing them keeps the id valid.
    assert id_mismatch(msgspec.structs.replace(command, created_at=2.0, term=4, reason="r")) is None
    evil = msgspec.structs.replace(command, changes=(FieldValue(path="/spec/image", value="evil"),))
    reason = id_mismatch(evil)
    assert reason is not None and command.id in reason and "not the hash" in reason
    assert id_mismatch(msgspec.structs.replace(command, id="engine-upgrade-0")) is not None
    # A retry's attempt is part of the id: restamped it is valid, only relabelled it is not.
    assert id_mismatch(as_attempt(command, 1)) is None
    assert id_mismatch(msgspec.structs.replace(command, attempt=1)) is not None


def test_result_subject_uses_the_bus_kind_token() -> None:
    result = CommandResult(
        command_id="c",
        service="engine-upgrade",
        target=Target(kind="Volume", namespace="longhorn-system", name="pvc.1"),
        outcome=Outcome.APPLIED,
    )
    assert result_subject_for(result) == "lh.res.engine-upgrade.volume.longhorn-system.pvc%2E1"
    odd = CommandResult(
        command_id="c",
        service="x",
        target=Target(kind="Secret", namespace="n", name="s"),
        outcome=Outcome.ERROR,
    )
    assert result_subject_for(odd) == "lh.res.x.secret.n.s"


def test_configuration_from_the_environment() -> None:
    config = load_config(
        ActuatorConfig,
        environ={"CORRAL_QPS": "0", "CORRAL_DRY_RUN": "true", "CORRAL_CONCURRENCY": "8", "CORRAL_BURST": "5"},
    )
    assert config.dry_run and config.concurrency == 8
    assert isinstance(rate_limiter(config.qps, config.burst), Unlimited)
    defaults = load_config(ActuatorConfig, environ={})
    limiter = rate_limiter(defaults.qps, defaults.burst)
    assert isinstance(limiter, TokenBucket) and (limiter.qps, limiter.burst) == (50.0, 100)
    spec = consumer_spec(defaults, "LH_COMMANDS_ENGINE_UPGRADE")
    assert spec.stream == "LH_COMMANDS_ENGINE_UPGRADE"
    assert spec.max_ack_pending >= defaults.concurrency * defaults.fetch_batch


def test_bad_configuration_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="CORRAL_QPS"):
        load_config(ActuatorConfig, environ={"CORRAL_QPS": "-1"})
    with pytest.raises(ConfigError, match="CORRAL_CONCURRENCY"):
        load_config(ActuatorConfig, environ={"CORRAL_CONCURRENCY": "0"})


def test_policy_file_is_found_in_the_checkout(tmp_path: Path) -> None:
    config = load_config(ActuatorConfig, environ={})
    assert policy_file(config).name == "actuator-policy.yaml" and policy_file(config).exists()
    explicit = load_config(ActuatorConfig, environ={"CORRAL_POLICY_PATH": str(tmp_path / "p.yaml")})
    assert policy_file(explicit) == tmp_path / "p.yaml"
