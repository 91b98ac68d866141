"""A service's NATS credentials: from a file or the environment, never from the URL, never logged."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_runtime import ServiceConfig, ServiceContext
from corral_runtime.service import EXIT_BAD_CONFIG, nats_auth, run_service


async def never(ctx: ServiceContext[ServiceConfig]) -> None:
    raise AssertionError("main must not run with unusable credentials")


def test_a_url_with_a_password_is_refused_without_printing_it(capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"CORRAL_NATS_URL": "nats://watcher:s3cret-pw@nats:4222"}
    assert run_service("watcher", ServiceConfig, never, environ=environ) == EXIT_BAD_CONFIG
    err = capsys.readouterr().err
    assert "carries credentials" in err and "CORRAL_NATS_PASSWORD_FILE" in err
    assert "s3cret-pw" not in err and "nats://nats:4222" in err


def test_a_user_without_a_readable_password_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    environ = {"CORRAL_NATS_USER": "watcher", "CORRAL_NATS_PASSWORD_FILE": str(tmp_path / "missing")}
    assert run_service("watcher", ServiceConfig, never, environ=environ) == EXIT_BAD_CONFIG
    assert "cannot read the NATS password file" in capsys.readouterr().err


def test_the_password_file_wins_and_tls_comes_from_the_ca(tmp_path: Path) -> None:
    secret = tmp_path / "watcher"
    secret.write_text("from-the-file\n")
    config = ServiceConfig(nats_user="watcher", nats_password="inline", nats_password_file=str(secret))
    auth = nats_auth(config)
    assert (auth.user, auth.password, auth.inbox_prefix) == ("watcher", "from-the-file", "_INBOX.watcher")
    assert nats_auth(ServiceConfig()).connect_options() == {}  # anonymous, on an open server
