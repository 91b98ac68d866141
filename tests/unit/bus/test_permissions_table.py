"""The permissions table (corral_bus.permissions) and its rendered nats-server configuration."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from corral_bus.auth import CredentialsError, NatsAuth, check_url, redact_url
from corral_bus.permissions import (
    DECISION_SERVICES,
    USERS,
    ServerOptions,
    env_password_variable,
    permissions_for,
    render_server_config,
)
from corral_cli.commands.run import nats_binary
from corral_model.subjects import command_stream

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "nats"
CHART_COPY = DEPLOY.parent / "chart" / "corral" / "files" / "nats"
"""The chart cannot reach files outside its directory, so it carries a copy."""


def test_the_deploy_configs_are_the_rendered_table() -> None:
    """deploy/nats/ is what `corral bus config` prints: edit the module, then re-render."""
    assert (DEPLOY / "nats-server.conf").read_text() == render_server_config(ServerOptions())
    tls = ServerOptions(tls_cert="/etc/nats/tls/tls.crt", tls_key="/etc/nats/tls/tls.key")
    assert (DEPLOY / "nats-server-tls.conf").read_text() == render_server_config(tls)


def test_the_charts_copy_is_the_rendered_table() -> None:
    """After re-rendering deploy/nats/, copy it into the chart: `cp deploy/nats/*.conf` there."""
    for name in ("nats-server.conf", "nats-server-tls.conf"):
        assert (CHART_COPY / name).read_text() == (DEPLOY / name).read_text(), name


def test_nats_server_accepts_the_config_and_reads_passwords_from_the_environment(tmp_path: Path) -> None:
    binary = nats_binary()
    config = DEPLOY / "nats-server.conf"
    env = {env_password_variable(user): f"pw-{user}" for user in USERS}
    ok = subprocess.run([binary, "-c", str(config), "-t"], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr + ok.stdout
    missing = subprocess.run([binary, "-c", str(config), "-t"], env={}, capture_output=True, text=True)
    assert missing.returncode != 0 and "CORRAL_NATS_PASSWORD_ADMIN" in missing.stderr + missing.stdout


def test_monitoring_listens_on_loopback_only() -> None:
    text = render_server_config(ServerOptions(monitor_port=8222))
    assert 'http: "127.0.0.1:8222"' in text
    assert "http:" not in render_server_config(ServerOptions(monitor_port=0))


def test_a_decision_service_publishes_only_its_own_commands_and_lease() -> None:
    for service in DECISION_SERVICES:
        publish = permissions_for(service).publish
        commands = [s for s in publish if s.startswith("lh.")]
        assert commands == [f"lh.cmd.{service}.>", "lh.cmd.upgrade-gate.event.>"], commands
        assert [s for s in publish if s.startswith("$KV.")] == [f"$KV.corral-leases.{service}"]
        assert not [s for s in publish if re.search(r"STREAM\.(CREATE|UPDATE|DELETE|PURGE)|MSG\.DELETE", s)]
        # It reads its own queued commands only: never another sender's ids.
        command_reads = {m.group(1) for s in publish if (m := re.search(r"GET\.(LH_COMMANDS\w*)", s))}
        assert command_reads == {command_stream(service)}, command_reads


def test_lease_liveness_stays_within_each_lease_user() -> None:
    """A lease user answers and asks its own replicas' liveness subjects (corral_bus.liveness), and
    answers into its own inboxes only; no other user may touch either."""
    lease_users = (*DECISION_SERVICES, "actuator")
    for user in USERS:
        if user == "admin":
            continue
        permissions = permissions_for(user)
        liveness = [s for s in (*permissions.publish, *permissions.subscribe) if s.startswith("corral.")]
        inbox_publish = [s for s in permissions.publish if s.startswith("_INBOX")]
        if user in lease_users:
            assert liveness == [f"corral.lease.{user}.*", f"corral.lease.{user}.*"], (user, liveness)
            assert inbox_publish == [f"_INBOX.{user}.>"], (user, inbox_publish)
        else:
            assert liveness == [] and inbox_publish == [], (user, liveness, inbox_publish)


def test_only_the_watcher_publishes_object_events_and_the_reader_publishes_nothing() -> None:
    for user in USERS:
        publish = permissions_for(user).publish
        may_publish_objects = any(s in ("lh.obj.>", ">") for s in publish)
        assert may_publish_objects == (user in ("watcher", "admin")), user
    reader = permissions_for("reader").publish
    assert all(s.startswith("$JS.API.") for s in reader), reader
    assert not [s for s in reader if "LH_COMMANDS" in s and "CONSUMER" in s]


def test_each_user_subscribes_to_its_own_inbox_only() -> None:
    for user in USERS:
        if user == "admin":
            continue
        inboxes = [s for s in permissions_for(user).subscribe if s.startswith("_INBOX")]
        assert inboxes == [f"_INBOX.{user}.>"]
    with pytest.raises(ValueError, match="no NATS user"):
        permissions_for("mallory")


def test_passwords_render_as_given_and_the_table_is_valid_json() -> None:
    text = render_server_config(ServerOptions(), {user: f"secret-{user}" for user in USERS})
    assert '"secret-watcher"' in text and "$CORRAL_NATS" not in text
    block = re.search(r'user: "actuator", password: "secret-actuator", permissions: (\{.*\})\}', text)
    assert block is not None
    assert json.loads(block.group(1))["publish"]["allow"][0] == "$JS.API.INFO"


def test_credentials_never_in_urls_nor_in_reprs(tmp_path: Path) -> None:
    assert redact_url("nats://watcher:s3cret@nats:4222") == "nats://nats:4222"
    assert redact_url("nats://a:b@n1:4222,nats://n2:4222") == "nats://n1:4222,nats://n2:4222"
    with pytest.raises(CredentialsError, match="carries credentials") as refused:
        check_url("nats://watcher:s3cret@nats:4222")
    assert "s3cret" not in str(refused.value)
    check_url("nats://nats:4222")
    password = tmp_path / "watcher.password"
    password.write_text("s3cret\n")
    auth = NatsAuth.from_settings(user="watcher", password_file=str(password))
    assert auth.password == "s3cret" and "s3cret" not in repr(auth)
    assert auth.connect_options()["inbox_prefix"] == "_INBOX.watcher"
    with pytest.raises(CredentialsError, match="no password"):
        NatsAuth.from_settings(user="watcher")
