"""`corral sandbox fault …` as an operator runs it against a running sandbox: a separate process that
finds the sandbox through its kubeconfig, changes a fault, prints the resulting state as JSON and exits
0 — or 1 with the sandbox's refusal on stderr."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.fixtures.sandbox import Sandbox

CORRAL = Path(sys.executable).with_name("corral")


async def corral(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        str(CORRAL), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)  # the machine is shared
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_sandbox_fault_sets_conflicts_and_reports_a_refusal(sandbox: Sandbox) -> None:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    code, out, err = await corral(
        "sandbox", "fault", "--kubeconfig", kubeconfig, "conflicts", "--rate", "0.5", "--only", "volumes"
    )
    assert code == 0, err
    assert sandbox.emulator.faults.conflict_rate == 0.5
    assert sandbox.emulator.faults.plurals == ["volumes"]
    state = json.loads(out)
    assert state["conflict_rate"] == 0.5 and state["plurals"] == ["volumes"]

    code, out, err = await corral(
        "sandbox", "fault", "--kubeconfig", kubeconfig, "crash-engine", "no-such-volume"
    )
    assert code == 1 and out == ""
    assert "404" in err and "no-such-volume" in err


async def test_sandbox_fault_v2_faults_and_the_io_ledger(sandbox: Sandbox) -> None:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    code, out, err = await corral("sandbox", "fault", "--kubeconfig", kubeconfig, "kill-v2-im", "node-2")
    assert code == 0, err
    assert json.loads(out)["v2InstanceManagersDown"] == ["node-2"]
    assert sandbox.simulator.memory.v2_im_down == {"node-2"}

    code, out, err = await corral("sandbox", "fault", "--kubeconfig", kubeconfig, "io")
    assert code == 0, err
    assert set(json.loads(out)) == {"now", "volumes"}

    code, out, err = await corral("sandbox", "fault", "--kubeconfig", kubeconfig, "block-target", "node-9")
    assert code == 1 and out == ""
    assert "404" in err and "node-9" in err
