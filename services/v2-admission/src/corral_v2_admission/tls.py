"""The serving certificate, from files, and picked up again when the files change.

cert-manager renews the Secret in place and the kubelet updates the mounted files; an SSLContext
given a new chain serves it on the next handshake. So the server looks at the files' modification
times every `interval_s` and reloads them, instead of needing a restart before the old certificate
expires. A half-written pair (the key no longer matching) keeps the old one and is tried again.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from corral_runtime import Logger


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class CertificateFiles:
    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str, log: Logger) -> None:
        self.context = context
        self._paths = (Path(cert_file), Path(key_file))
        self._log = log
        self._seen = self._stamp()

    def _stamp(self) -> tuple[float, ...]:
        try:
            return tuple(p.stat().st_mtime_ns for p in self._paths)
        except OSError:
            return ()

    def reload_if_changed(self) -> bool:
        stamp = self._stamp()
        if not stamp or stamp == self._seen:
            return False
        cert, key = str(self._paths[0]), str(self._paths[1])
        try:
            # on a scratch context first: a failed load leaves a context half-changed (the new
            # certificate with the old key), which would refuse every handshake
            tls_context(cert, key)
            self.context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as error:
            self._log.warning("the new certificate does not load yet; serving the old one", error=repr(error))
            return False
        self._seen = stamp
        self._log.info("certificate reloaded", cert=str(self._paths[0]))
        return True

    async def watch(self, stop: asyncio.Event, interval_s: float) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                self.reload_if_changed()
