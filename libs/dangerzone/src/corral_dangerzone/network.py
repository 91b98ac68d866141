"""`storage-network` / `endpoint-network-for-rwx-volume` syntax and the Multus annotation Longhorn
derives from them (§3.3, §3.4, §4.4).

Validation and annotation building are two different rules in Longhorn: admission wants exactly one
`/` (empty parts allowed), while the annotation builder splits at the first `/` and writes the two
halves into a fixed-format string. Both are kept, so a decider predicts byte-for-byte what Longhorn
writes and compares annotations as strings, as Longhorn does.
"""

from __future__ import annotations

import msgspec

from corral_dangerzone.errors import SettingValueError

CNI_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
STORAGE_NETWORK_INTERFACE = "lhnet1"
"""Data-plane interface (instance-manager and backing-image-manager pods)."""
ENDPOINT_NETWORK_INTERFACE = "lhnet2"
"""RWX endpoint interface (the csi-plugin DaemonSet template)."""


class CniNetwork(msgspec.Struct, frozen=True):
    """A NetworkAttachmentDefinition reference, `<namespace>/<name>`."""

    namespace: str
    name: str


def validate_cni_network(value: str) -> None:
    """`ValidateCNINetwork`: "" (none) or exactly one `/`."""
    if value and len(value.split("/")) != 2:
        raise SettingValueError(
            f"cni network must be in <NAMESPACE>/<NETWORK-ATTACHMENT-DEFINITION> format: {value}"
        )


def parse_cni_network(value: str) -> CniNetwork | None:
    """The validated setting as a typed reference; None when the setting is empty."""
    validate_cni_network(value)
    if not value:
        return None
    namespace, name = value.split("/")
    return CniNetwork(namespace=namespace, name=name)


def render_cni_network(network: CniNetwork | None) -> str:
    if network is None:
        return ""
    if "/" in network.namespace or "/" in network.name:
        raise ValueError(f"a network setting cannot express {network!r}")
    return f"{network.namespace}/{network.name}"


def cni_annotation(setting_value: str, interface: str) -> str:
    """`CreateCniAnnotationFromSetting`: the exact annotation text, "" when there is no `/`.

    Longhorn formats the halves with `%s` (no JSON escaping) and splits at the first `/` only.
    """
    parts = setting_value.split("/", 1)
    if len(parts) != 2:
        return ""
    namespace, name = parts
    return f'[{{"namespace": "{namespace}", "name": "{name}", "interface": "{interface}"}}]'
