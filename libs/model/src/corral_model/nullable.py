"""`Nullable[T]`: a field Longhorn's CRD marks `nullable: true`, read as `T` with null meaning empty.

The apiextensions API server keeps a literal `null` only on fields whose schema says `nullable:
true` (it prunes every other null, so a nil map or list elsewhere arrives as an absent key;
tests/data/corpus/nullable-fields.md lists them per kind and release). A stopped Engine, for one,
carries `status.replicaModeMap: null`, and msgspec is strict: a `dict` field refuses `null`. So such
a field is declared `Nullable[dict[str, str]]`:

* msgspec sees `dict[str, str] | None` and accepts the null natively, without a `dec_hook` (which
  would run Python code for every value of every object);
* the Struct's `__post_init__` replaces a None by the empty container, so every reader gets a
  `dict` and never tests for None; and the type checker sees exactly that, because under
  TYPE_CHECKING the alias is `T` itself.

Only Structs holding a nullable field get a `__post_init__`, so decoding a Volume (which models
neither of its two nullable fields) costs what it did before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:
    from typing import Annotated, TypeAlias

    Nullable: TypeAlias = Annotated[T, "nullable"]
else:

    class _NullableAlias:
        """`Nullable[T]` is `Optional[T]` to msgspec at run time (see the module docstring)."""

        def __getitem__(self, item: Any) -> Any:
            return Optional[item]  # noqa: UP045 - built at run time, not an annotation

    Nullable = _NullableAlias()
