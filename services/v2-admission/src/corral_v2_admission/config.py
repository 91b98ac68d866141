"""The webhook server's configuration: `CORRAL_<FIELD>` variables (corral_runtime.config).

It uses no NATS; of the shared fields it reads `namespace` (Longhorn's), the health server's host and
port, and the log level.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from corral_runtime import ServiceConfig


class AdmissionConfig(ServiceConfig, kw_only=True, frozen=True):
    kubeconfig: str = ""
    """Path of a kubeconfig; empty means $KUBECONFIG, then the in-cluster service account."""
    tls_cert_file: str = ""
    """PEM certificate (chain) the HTTPS listener presents; empty serves plain HTTP (tests only)."""
    tls_key_file: str = ""
    tls_reload_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """How often the certificate files are checked for a renewal (tls.py)."""
    webhook_host: str = "0.0.0.0"
    webhook_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9443
    reservation_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    """How long an admitted manager create counts as active before the API server shows it."""
    read_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    """Per read of the cluster; kube-apiserver's own call to the webhook times out at 10 s."""

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("CORRAL_TLS_CERT_FILE and CORRAL_TLS_KEY_FILE go together")
