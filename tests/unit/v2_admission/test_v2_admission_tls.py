"""A renewed certificate (cert-manager rewrites the mounted files) is served on the next handshake,
without a restart; a pair that does not load yet keeps the old one."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from pathlib import Path

from corral_runtime import configure_logging
from corral_v2_admission.tls import CertificateFiles, tls_context
from tests.integration.bus.test_nats_tls import self_signed


async def served_certificate(port: int) -> bytes:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return bytes(der)


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_cert, old_key = self_signed(tmp_path / "old")
    new_cert, new_key = self_signed(tmp_path / "new")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(old_cert, cert)
    shutil.copy(old_key, key)
    context = tls_context(str(cert), str(key))
    files = CertificateFiles(context, str(cert), str(key), configure_logging("test", "error"))

    async def nothing(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(nothing, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await served_certificate(port) == der(old_cert)
        assert files.reload_if_changed() is False  # nothing changed

        shutil.copy(new_cert, cert)  # half-way: the new certificate with the old key
        os.utime(cert, ns=(1, 10**18))
        assert files.reload_if_changed() is False
        assert await served_certificate(port) == der(old_cert)

        shutil.copy(new_key, key)
        os.utime(key, ns=(1, 10**18 + 1))
        assert files.reload_if_changed() is True
        assert await served_certificate(port) == der(new_cert)
    finally:
        server.close()
        await server.wait_closed()
