"""TLS by configuration: a locked-down NATS with a certificate made at test time (openssl), a client
that verifies it with `CORRAL_NATS_TLS_CA`, and one without TLS refused."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import Error as NatsError
from nats.errors import NoServersError

from corral_bus import connect
from corral_bus.auth import NatsAuth
from corral_bus.permissions import ServerOptions
from tests.fixtures.nats import BinaryNats
from tests.fixtures.secure_nats import SESSION_PASSWORDS

pytestmark = pytest.mark.integration


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key (it is its own CA)."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is needed to make the test certificate")
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=corral-test-nats",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def tls_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BinaryNats, Path]]:
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    server = BinaryNats(SESSION_PASSWORDS, tls=ServerOptions(tls_cert=str(cert), tls_key=str(key)))
    server.start()
    try:
        yield server, cert
    finally:
        server.stop()


async def test_a_client_verifying_the_certificate_connects_and_works(
    tls_nats: tuple[BinaryNats, Path],
) -> None:
    server, cert = tls_nats
    auth = NatsAuth(user="admin", password=SESSION_PASSWORDS["admin"], tls_ca=str(cert))
    bus = await connect(server.url, "tls-admin", auth=auth)
    try:
        assert bus.nc.connected_url is not None
        info = await bus.js.account_info()
        assert info is not None
    finally:
        await bus.close()


async def test_a_client_without_tls_is_refused(tls_nats: tuple[BinaryNats, Path]) -> None:
    server, _ = tls_nats
    with pytest.raises((NatsError, NoServersError, OSError)):
        nc = await nats.connect(
            server.url,
            user="admin",
            password=SESSION_PASSWORDS["admin"],
            allow_reconnect=False,
            connect_timeout=2,
        )
        await nc.close()
