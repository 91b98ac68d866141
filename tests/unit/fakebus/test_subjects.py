"""The fake server's subject matching, which every stream, filter and subscription of it goes
through: `*` is exactly one token, `>` one or more at the end, as on a real server."""

from __future__ import annotations

import pytest

from tests.fixtures.fakebus.subjects import matches, overlap


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("lh.obj.>", "lh.obj.volume.ns.v", True),
        ("lh.obj.>", "lh.obj", False),
        ("lh.obj.volume.*.>", "lh.obj.volume.ns.v", True),
        ("lh.obj.volume.*.>", "lh.obj.volume.ns", False),
        ("lh.cmd.*.x", "lh.cmd.toy.x", True),
        ("lh.cmd.*.x", "lh.cmd.toy.y.x", False),
        ("a.b", "a.b.c", False),
        ("a.b.c", "a.b", False),
    ],
)
def test_matches(pattern: str, subject: str, expected: bool) -> None:
    assert matches(pattern, subject) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("lh.cmd.>", "lh.cmd.toy.>", True),
        ("lh.cmd.a.>", "lh.cmd.b.>", False),
        ("lh.cmd.a.>", "lh.cmd.*.x", True),
        ("lh.obj.>", "lh.cmd.>", False),
        ("x.>", "x", False),
        ("x.*", "x.y.z", False),
        ("x.*.z", "x.y.*", True),
    ],
)
def test_overlap_is_symmetric_and_token_wise(a: str, b: str, expected: bool) -> None:
    assert overlap(a, b) is expected
    assert overlap(b, a) is expected
