"""How the read-only commands reach the bus: credentials ride in the URL the NATS client reads,
never in what is printed, and a port-forward keeps them while pointing at its local end."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from corral_cli.main import build_parser
from corral_cli.nats_access import (
    AccessError,
    NatsAccess,
    add_nats_options,
    auth_of,
    forwarded,
    with_userinfo,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_nats_options(parser)
    return parser.parse_args(argv)


def test_a_user_and_password_ride_in_the_url_and_are_never_shown() -> None:
    access = NatsAccess.from_args(
        parse("--nats-url", "nats://nats.corral:4222", "--nats-user", "reader", "--nats-password", "p@ss:w")
    )
    assert access.url == "nats://reader:p%40ss%3Aw@nats.corral:4222"
    assert access.shown == "nats://nats.corral:4222"


def test_a_token_rides_alone_and_no_credentials_leave_the_url_as_it_is() -> None:
    assert with_userinfo("nats://h:4222", "", "", "t0k") == "nats://t0k@h:4222"
    assert with_userinfo("nats://h:4222", "", "", "") == "nats://h:4222"


def test_the_environment_names_the_bus_and_its_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    creds = tmp_path / "reader.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    monkeypatch.setenv("CORRAL_NATS_URL", "nats://10.0.0.5:4222")
    monkeypatch.setenv("CORRAL_NATS_CREDS", str(creds))
    monkeypatch.setenv("CORRAL_PORT_FORWARD", "corral/corral-nats")
    access = NatsAccess.from_args(parse())
    assert (access.url, access.creds, access.port_forward) == (
        "nats://10.0.0.5:4222",
        str(creds),
        "corral/corral-nats",
    )


def test_a_missing_credentials_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AccessError, match="no NATS credentials file at"):
        NatsAccess.from_args(parse("--nats-creds", str(tmp_path / "absent.creds")))


def test_a_port_forward_keeps_the_credentials_and_points_at_its_local_end() -> None:
    assert forwarded("nats://reader:pw@nats.corral:4222", 51234) == "nats://reader:pw@127.0.0.1:51234"
    assert forwarded("nats://nats.corral:4222", 51234) == "nats://127.0.0.1:51234"


def test_a_parser_with_only_a_url_gives_a_plain_url() -> None:
    access = NatsAccess.from_args(argparse.Namespace(nats="nats://h:4222"))
    assert (access.url, access.creds, access.port_forward) == ("nats://h:4222", "", "")


def test_the_password_can_come_from_a_mounted_file(tmp_path: Path) -> None:
    secret = tmp_path / "reader"
    secret.write_text("s3cret\n")
    access = NatsAccess.from_args(
        parse("--nats", "nats://h:4222", "--nats-user", "reader", "--nats-password-file", str(secret))
    )
    assert access.url == "nats://reader:s3cret@h:4222"
    auth = auth_of(access)  # what `demo` connects with
    assert (auth.user, auth.password) == ("reader", "s3cret")
    with pytest.raises(AccessError, match="cannot read the NATS password file"):
        NatsAccess.from_args(parse("--nats-user", "reader", "--nats-password-file", str(tmp_path / "none")))


BUS_READERS = [
    ["events", "dump"],
    ["events", "tail"],
    ["progress", "engine-upgrade"],
    ["progress", "setting-sync"],
    ["replay", "engine-upgrade", "--from-seq", "1"],
    ["demo", "engine-upgrade", "--kubeconfig", "k"],
]


@pytest.mark.parametrize("command", BUS_READERS, ids=lambda c: " ".join(c[:2]))
def test_every_command_that_reads_the_bus_takes_the_same_credentials(command: list[str]) -> None:
    credentials = ["--nats", "nats://h:4222", "--nats-user", "reader", "--nats-password", "pw"]
    args = build_parser().parse_args([*command, *credentials])
    assert NatsAccess.from_args(args).url == "nats://reader:pw@h:4222"
