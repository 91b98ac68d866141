"""`corral run` as a user runs it: NATS comes up, Ctrl-C stops everything, nothing is left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral_cli.commands.run import discover_services, nats_answers, repo_root

DEADLINE_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc (children run in sessions of their own)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.integration
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_corral_run_starts_nats_and_stops_cleanly(tmp_path: Path, stop_signal: signal.Signals) -> None:
    nats_port = free_port()
    corral = Path(sys.executable).with_name("corral")
    proc = subprocess.Popen(
        [
            str(corral),
            "run",
            "--run-dir",
            str(tmp_path),
            "--nats-port",
            str(nats_port),
            "--nats-monitor-port",
            "0",
            "--health-base-port",
            str(free_port()),
            "--no-plugins",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=repo_root(),
        env={**os.environ, "CORRAL_LOG_LEVEL": "info"},
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not nats_answers("127.0.0.1", nats_port):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "NATS never answered"
            time.sleep(0.05)
        assert (tmp_path / "nats").is_dir()
        assert (tmp_path / "logs" / "nats.log").is_file()
        # Wait for the "where to look" banner: every component has been started by then.
        assert proc.stdout is not None
        banner: list[str] = []
        while not banner or banner[-1] != "Ctrl-C stops everything.\n":
            line = proc.stdout.readline()
            assert line, f"exited early: {''.join(banner)}"
            banner.append(line)
        children = descendants(proc.pid)
        expected = 1 + len(discover_services(repo_root()))  # NATS and each service
        assert len(children) >= expected, (children, banner)

        proc.send_signal(stop_signal)
        output, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, output
        assert "corral run: stopped" in output
        assert not nats_answers("127.0.0.1", nats_port)
        assert not [pid for pid in children if alive(pid)], output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
