"""Pruning `null` from fields a CRD's schema does not mark `nullable: true`, as the apiextensions
server does on every write (`PruneNonNullableNullsWithoutDefaults` in k8s.io/apiextensions-apiserver
`pkg/apiserver/schema/defaulting/prunenulls.go`).

This is why a client of a real cluster sees a literal `null` only on Longhorn's nullable fields (a
stopped Engine's `status.replicaModeMap`) and an absent key for every other nil map or list: a
sandbox that kept every null would hide a decoder that trips on the absent key, and one that kept
none would hide a decoder that trips on the null. Only fields the schema describes are touched
(a property, or any key under `additionalProperties`); a null under an open
(`x-kubernetes-preserve-unknown-fields`) part of the schema that names no such field is kept, as
the server keeps it. A field with a `default` keeps its null too (the server defaults it instead;
the emulator does no defaulting).
"""

from __future__ import annotations

from typing import Any


def _field_schema(key: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    properties = schema.get("properties")
    if isinstance(properties, dict):
        sub = properties.get(key)
        if isinstance(sub, dict):
            return sub
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, dict) else None


def _prunable(value: Any, schema: dict[str, Any] | None) -> bool:
    return value is None and schema is not None and not schema.get("nullable") and "default" not in schema


def prune_nulls(value: Any, schema: dict[str, Any] | None) -> Any:
    """`value` without the nulls the schema gives no right to be there (see the module docstring).

    Copy on write: what holds no such null is returned as it is, so the caller's objects (a seed
    loaded in process) are never changed under it.
    """
    if schema is None:
        return value
    if isinstance(value, dict):
        out: dict[str, Any] | None = None
        for key, item in value.items():
            sub = _field_schema(key, schema)
            kept = _DROP if _prunable(item, sub) else prune_nulls(item, sub)
            if kept is not item and out is None:
                out = dict(value)
            if out is not None:
                if kept is _DROP:
                    del out[key]
                else:
                    out[key] = kept
        return value if out is None else out
    if isinstance(value, list):
        items = schema.get("items")
        items = items if isinstance(items, dict) else None
        pruned = [prune_nulls(item, items) for item in value]
        return value if all(a is b for a, b in zip(pruned, value, strict=True)) else pruned
    return value


_DROP: Any = object()
