"""`system-managed-components-node-selector` syntax (§3.4): `key:value;key:value`.

Longhorn's description shows `key=value`, which its own parser rejects; corral follows the parser,
because the parser is what decides what a pod's nodeSelector becomes.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral_dangerzone.errors import SettingValueError


def parse_node_selector(setting: str) -> dict[str, str]:
    """Trim spaces, split on `;`; each label has exactly one `:`, both sides trimmed; later keys win."""
    selector: dict[str, str] = {}
    text = setting.strip(" ")
    if not text:
        return selector
    for label in text.split(";"):
        label = label.strip(" ")
        parts = label.split(":")
        if len(parts) != 2:
            raise SettingValueError(
                "Error while unmarshal node selector: "
                f"invalid label {label}: should contain the separator ':'"
            )
        selector[parts[0].strip(" ")] = parts[1].strip(" ")
    return selector


def render_node_selector(selector: Mapping[str, str]) -> str:
    for key, value in selector.items():
        for part in (key, value):
            if ":" in part or ";" in part or part != part.strip(" "):
                raise ValueError(f"the node-selector setting cannot express the label {key!r}: {value!r}")
    return ";".join(f"{key}:{value}" for key, value in selector.items())


def same_node_selector(pod_selector: Mapping[str, str] | None, expected: Mapping[str, str]) -> bool:
    """§4.5: a missing pod selector equals an empty setting; otherwise the maps must be equal."""
    if pod_selector is None:
        return not expected
    return dict(pod_selector) == dict(expected)
