"""The nats-py internals corral relies on exist in the installed nats-py, as natsinternals declares.

An upgrade of nats-py that moves or renames any of them must fail here, not in production (where
the publisher would quietly fall back to the slow public API). And corral must not reach into
nats-py anywhere else: that is what keeps this list complete.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from corral_bus import natsinternals

ROOT = Path(__file__).resolve().parents[3]


def test_the_installed_nats_py_is_a_version_the_internals_were_checked_against() -> None:
    low, below = natsinternals.SUPPORTED
    installed = natsinternals.installed_version()
    assert low <= installed < below, (
        f"nats-py {installed} is outside {low}..<{below}: read its Client for every member of "
        "natsinternals.CLIENT_MEMBERS and SUBSCRIPTION_MEMBERS, then widen SUPPORTED"
    )
    assert natsinternals.version_supported()


def test_every_client_member_exists_on_a_client_instance() -> None:
    client = Client()
    missing = [name for name in natsinternals.CLIENT_MEMBERS if not hasattr(client, name)]
    assert missing == []
    assert natsinternals.supported(client)
    assert isinstance(client._pending, list)
    assert isinstance(client._pending_data_size, int) and isinstance(client._max_pending_size, int)


def test_the_methods_are_called_with_the_signatures_they_have() -> None:
    process_msg = list(inspect.signature(Client._process_msg).parameters)
    assert process_msg == ["self", "sid", "subject", "reply", "data", "headers"]
    assert "force_flush" in inspect.signature(Client._flush_pending).parameters


def test_a_subscription_carries_its_sid() -> None:
    sub = Subscription(Client(), id=7, subject="_INBOX.x.*")
    assert natsinternals.subscription_id(sub) == 7


def _private_members(source: str) -> set[str]:
    """Every `x._name` attribute the module reads or writes (its own `self._...` aside)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            found.add(node.attr)
    return found


def test_the_declared_members_are_all_the_module_touches() -> None:
    touched = _private_members(Path(natsinternals.__file__).read_text())
    declared = set(natsinternals.CLIENT_MEMBERS) | set(natsinternals.SUBSCRIPTION_MEMBERS)
    assert touched <= declared, f"undeclared nats-py internals: {touched - declared}"


_NATS_OBJECT = re.compile(r"\b(?:nc|client|sub|subscription|msg|js|bus\.nc|bus\.js)\._[a-z]")


def test_no_other_module_reaches_into_nats_py() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for base in ("libs", "services")
        for path in sorted((ROOT / base).rglob("*.py"))
        if path.name != "natsinternals.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _NATS_OBJECT.search(line)
    ]
    assert offenders == []
