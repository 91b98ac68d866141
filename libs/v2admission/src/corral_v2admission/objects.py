"""Reading raw Kubernetes objects (dicts, as JSON decodes them) the way Longhorn's Go types do:
an absent field, `null` and the zero value read alike, so a rule never trips over a missing key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def section(obj: Obj | None, name: str) -> Obj:
    value = (obj or {}).get(name)
    return value if isinstance(value, Mapping) else {}


def spec_str(obj: Obj | None, key: str) -> str:
    value = section(obj, "spec").get(key)
    return "" if value is None else str(value)


def status_str(obj: Obj | None, key: str) -> str:
    value = section(obj, "status").get(key)
    return "" if value is None else str(value)


def name(obj: Obj | None) -> str:
    return str(section(obj, "metadata").get("name") or "")


def data_engine(obj: Obj | None) -> str:
    """Longhorn defaults a volume's data engine to v1; the upgrade CRs have no default."""
    return spec_str(obj, "dataEngine")


def string_list(value: Any) -> list[str]:
    """`spec.nodes`: absent, `null` and `[]` are the same empty list (Go decodes all three to a nil
    or empty slice, and the comparison is about which nodes, not about JSON spelling)."""
    if not isinstance(value, list):
        return []
    return [str(v) for v in value]
