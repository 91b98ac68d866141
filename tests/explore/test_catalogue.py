"""The matrix's bookkeeping, without a world: every fault is either injectable or named with what
the sandbox lacks, every (service, state, fault) appears once, and explore.json's totals count
what its cells say."""

from __future__ import annotations

from typing import Any

from tests.explore.__main__ import summary
from tests.explore.faults import CATALOGUE, FAULTS, STATIC_LACKS
from tests.explore.matrix import SPECS, cells


def test_every_fault_is_injectable_or_says_what_the_sandbox_lacks() -> None:
    assert set(FAULTS) == set(CATALOGUE) | set(STATIC_LACKS)
    assert not set(CATALOGUE) & set(STATIC_LACKS)
    assert all(reason for reason in STATIC_LACKS.values())


def test_every_cell_appears_once() -> None:
    found = [c.id for c in cells()]
    assert len(found) == len(set(found))
    assert len(found) == sum(len(spec.states) for spec in SPECS.values()) * len(FAULTS)
    assert set(SPECS) == {"engine-upgrade", "im-restart", "setting-sync", "v2-upgrade"}


def test_the_totals_count_the_cells() -> None:
    records: list[dict[str, Any]] = [
        {"service": "s", "state": "a", "fault": "f", "outcome": "pass", "recover_s": 1.5},
        {"service": "s", "state": "a", "fault": "g", "outcome": "fail", "recover_s": None, "known": "k"},
        {"service": "s", "state": "b", "fault": "f", "outcome": "fail", "recover_s": None},
        {"service": "s", "state": "b", "fault": "g", "outcome": "not expressible: no node removal"},
    ]
    totals = summary(records)["totals"]
    assert totals == {
        "cells": 4,
        "pass": 1,
        "fail": 2,
        "not expressible": 1,
        "known_failures": 1,
        "other_failures": 1,
    }
    assert summary(records)["recover_s_max"] == 1.5
