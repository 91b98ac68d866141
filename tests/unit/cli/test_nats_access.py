"""How the read-only commands reach the bus: credentials ride in the URL the NATS client reads,
never in what is printed, and a port-forward keeps them while pointing at its local end."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from corral_cli.nats_access import AccessError, NatsAccess, add_nats_options, forwarded, with_userinfo


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
