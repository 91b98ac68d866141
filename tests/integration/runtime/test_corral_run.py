"""`corral run` as a user runs it: NATS comes up, Ctrl-C stops everything, nothing is left behind."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import nats
import pytest

from corral_bus import connect
from corral_bus.permissions import READER
from corral_cli.commands.run import nats_answers, repo_root, sandbox_available
from corral_cli.demo.show import DEMO_IMAGE
from corral_cli.run_nats import RunNatsAuth
from corral_kube.client import connected
from corral_model.subjects import STREAMS
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan
from tests.fixtures.processes import free_port, free_port_block, python_module, wait_until

DEADLINE_S = 60.0
HEALTH_PORTS = 16  # one per service `corral run` starts (health_base_port + index), with room to spare
READY_DEADLINE_S = 180.0  # service imports alone take seconds on a loaded 2-core machine


@dataclass(frozen=True)
class CorralRun:
    proc: subprocess.Popen[str]
    nats_port: int


def start_corral_run(
    run_dir: Path, *options: str, env: Mapping[str, str] | None = None, quiet: bool = False
) -> CorralRun:
    """`corral run` from the checkout, as a user starts it, with nothing shared between tests:
    its own run dir, free NATS and health ports, no NATS monitor, no installed plugins. `options`
    add to that (they come last, so a trailing `--services` may list nothing); `env` adds to this
    process's environment. Output (stdout and stderr) is a text pipe, or discarded when `quiet`."""
    nats_port = free_port()
    corral = Path(sys.executable).with_name("corral")
    argv = [
        str(corral),
        "run",
        *("--run-dir", str(run_dir)),
        *("--nats-port", str(nats_port)),
        *("--nats-monitor-port", "0"),
        *("--health-base-port", str(free_port_block(HEALTH_PORTS))),
        "--no-plugins",
        *options,
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else subprocess.STDOUT,
        text=True,
        cwd=repo_root(),
        env={**os.environ, **(env or {})},
    )
    return CorralRun(proc, nats_port)


def wait_for_nats(run: CorralRun) -> None:
    """Until the run's NATS server answers; fails if `corral run` exits first or DEADLINE_S passes."""

    def answers() -> bool:
        assert run.proc.poll() is None, f"corral run exited: {run.proc.communicate()[0]}"
        return nats_answers("127.0.0.1", run.nats_port)

    wait_until(answers, within=DEADLINE_S, what="NATS to answer")


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


def wait_ready(url: str, proc: subprocess.Popen[str]) -> None:
    def ready() -> bool:
        assert proc.poll() is None, "corral run exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False  # not listening yet (still importing), or 503 (not ready yet)

    wait_until(ready, within=READY_DEADLINE_S, what=f"{url} to be ready", interval=0.1)


def stop_leftovers(proc: subprocess.Popen[str]) -> None:
    """After a failed assertion: stop `corral run` as a user would, so its children go with it."""
    if proc.poll() is not None:
        return
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid in children:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("stop_signal", "sandbox"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-everything", "sigterm-without-sandbox"],
)
def test_corral_run_starts_everything_and_stops_cleanly(
    tmp_path: Path, stop_signal: signal.Signals, sandbox: bool
) -> None:
    # Until the sandbox command exists in the checkout, the services that need a cluster may exit;
    # then only the clean stop is checked.
    with_sandbox = sandbox and sandbox_available()
    run = start_corral_run(
        tmp_path,
        "--no-demo" if sandbox else "--no-sandbox",  # the demo has a test of its own
        env={"CORRAL_LOG_LEVEL": "info"},
    )
    proc, nats_port = run.proc, run.nats_port
    try:
        wait_for_nats(run)
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
        assert children, banner
        if with_sandbox:
            assert (tmp_path / "sandbox" / "kubeconfig").is_file()
            assert any(line.strip().startswith("sandbox:") for line in banner), banner
            # With NATS and the cluster there, every service must get ready, and later exit 0.
            for url in [word for line in banner for word in line.split() if word.endswith("/readyz")]:
                wait_ready(url, proc)

        proc.send_signal(stop_signal)
        output, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, output
        assert "corral run: stopped" in output
        if with_sandbox:
            codes = output.split("exit codes: ", 1)[1].split(")", 1)[0]
            assert all(item.endswith(" 0") for item in codes.split(", ")), output
        assert not nats_answers("127.0.0.1", nats_port)
        assert not [pid for pid in children if alive(pid)], output
    finally:
        stop_leftovers(proc)


@pytest.mark.integration
def test_an_exited_service_is_restarted_after_a_backoff(tmp_path: Path) -> None:
    proc = start_corral_run(
        tmp_path,
        *("--no-sandbox", "--services", "tests.integration.runtime.crash_once"),
        env={"CORRAL_TEST_MARKER_DIR": str(tmp_path)},
    ).proc
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        while not any("restarting in 1s" in line for line in seen):
            line = proc.stdout.readline()
            assert line, f"exited early: {''.join(seen)}"
            seen.append(line)
        assert any("exited with code 3" in line for line in seen), seen
        log = tmp_path / "logs" / "crash-once.log"

        def restarted() -> bool:
            assert proc.poll() is None, log.read_text()
            return "second start" in log.read_text()

        wait_until(restarted, within=DEADLINE_S, what="the second start")
        assert "first start" in log.read_text()  # the restart appended to the first run's log

        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, output
        assert "exit codes: nats 0, crash-once 0" in output
    finally:
        stop_leftovers(proc)


@pytest.mark.integration
def test_a_health_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    base = free_port_block(HEALTH_PORTS)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 1))
        holder.listen()
        # the last --health-base-port wins: the one whose second port is held
        proc = start_corral_run(tmp_path, "--no-sandbox", "--health-base-port", str(base)).proc
        try:
            output, _ = proc.communicate(timeout=DEADLINE_S)
        finally:
            stop_leftovers(proc)
    assert proc.returncode == 1, output
    assert f"health port(s) {base + 1} in use; choose another --health-base-port" in output
    assert not (tmp_path / "nats").exists(), "NATS was started before the ports were checked"


async def _streams_as_reader(run_dir: Path, nats_port: int) -> set[str]:
    """The streams a `reader` sees, with the password `corral run` generated for it."""
    auth = RunNatsAuth(run_dir).auth(READER)
    bus = await connect(f"nats://127.0.0.1:{nats_port}", "test-reader", auth=auth, max_reconnect_attempts=0)
    try:
        return {(await bus.js.stream_info(name)).config.name or "" for name in STREAMS}
    finally:
        await bus.close()


@pytest.mark.integration
def test_nats_is_locked_down_and_restarted_when_it_exits(tmp_path: Path) -> None:
    """NATS runs with corral's users (the setup step made the streams as admin; a reader reads them
    with its generated password, an anonymous client is turned away); killed, it is restarted with
    its store, and the run goes on."""
    run = start_corral_run(tmp_path, "--no-sandbox", "--services")  # NATS alone
    proc = run.proc
    try:
        wait_for_nats(run)
        assert proc.stdout is not None
        seen: list[str] = []
        while not seen or seen[-1] != "Ctrl-C stops everything.\n":
            line = proc.stdout.readline()
            assert line, f"exited early: {''.join(seen)}"
            seen.append(line)
        assert (tmp_path / "nats-auth" / "reader.password").stat().st_mode & 0o077 == 0
        assert asyncio.run(_streams_as_reader(tmp_path, run.nats_port)) == set(STREAMS)
        with pytest.raises(Exception, match=r"(?i)authorization"):
            asyncio.run(_streams_as_reader_anonymous(run.nats_port))
        [nats_pid] = descendants(proc.pid)
        os.kill(nats_pid, signal.SIGKILL)
        while not any("nats exited with code -9; restarting" in line for line in seen):
            line = proc.stdout.readline()
            assert line, f"exited: {''.join(seen)}"
            seen.append(line)
        wait_until(
            lambda: nats_answers("127.0.0.1", run.nats_port) and descendants(proc.pid) - {nats_pid},
            within=DEADLINE_S,
            what="NATS to be restarted",
        )
        assert proc.poll() is None
        assert asyncio.run(_streams_as_reader(tmp_path, run.nats_port)) == set(STREAMS)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, output
    finally:
        stop_leftovers(proc)


async def _streams_as_reader_anonymous(nats_port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{nats_port}", allow_reconnect=False, connect_timeout=2)
    await nc.close()


@pytest.mark.integration
def test_children_die_with_a_killed_corral_run(tmp_path: Path) -> None:
    run = start_corral_run(tmp_path, "--no-sandbox", "--services", quiet=True)  # NATS alone
    proc, nats_port = run.proc, run.nats_port
    try:
        wait_for_nats(run)
        children = descendants(proc.pid)
        proc.kill()  # no chance to stop anything itself
        proc.wait()
        wait_until(lambda: not any(alive(pid) for pid in children), within=DEADLINE_S, what="NATS to die")
        assert not nats_answers("127.0.0.1", nats_port)
    finally:
        stop_leftovers(proc)


FIGURES = re.compile(
    r"^\s*[\d.]+s (?P<node>\S+)\s+limit (?P<limit>\d+)  in flight (?P<in_flight>\d+)"
    r"  done (?P<done>\d+)  waiting (?P<waiting>\d+)  blocked (?P<blocked>\d+)"
)
DEMO_DEADLINE_S = 200.0  # start-up (up to READY_DEADLINE_S on a loaded machine) plus a short wave


class Output:
    """A child's output lines, read by a thread so a silent child cannot outlast a deadline; a miss
    shows what was printed and the tail of every log."""

    def __init__(self, proc: subprocess.Popen[str], logs: Path) -> None:
        self.logs = logs
        self.seen: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        self._done = False

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self._lines.put(line)
            self._lines.put("")  # end of output

        threading.Thread(target=pump, daemon=True).start()

    def until(self, prefix: str, within: float) -> list[str]:
        """Lines up to the first one starting with `prefix` ("" reads to the end of the output)."""
        deadline = time.monotonic() + within
        while not self._done:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.fail(f"no {prefix!r} line in {within:.0f}s")
            if not line:
                self._done = True
                break
            self.seen.append(line)
            if prefix and line.startswith(prefix):
                return self.seen
        if prefix:
            self.fail("exited")
        return self.seen

    def fail(self, what: str) -> NoReturn:
        tails = "".join(
            f"\n--- {log.name}\n" + "".join(log.read_text(errors="replace").splitlines(True)[-15:])
            for log in sorted(self.logs.glob("*.log"))
        )
        raise AssertionError(f"{what}; output:\n{''.join(self.seen)}{tails}")


async def emulator_volumes(kubeconfig: Path) -> list[dict[str, object]]:
    from kubernetes_asyncio import client

    async with connected(str(kubeconfig)) as api:
        answer = await client.CustomObjectsApi(api).list_namespaced_custom_object(
            "longhorn.io", "v1beta2", "longhorn-system", "volumes"
        )
    items: list[dict[str, object]] = answer["items"]
    return items


async def corral_volume_events(kubeconfig: Path) -> list[dict[str, Any]]:
    """The Events corral recorded about Volumes, as `kubectl get events` lists them."""
    from kubernetes_asyncio import client

    async with connected(str(kubeconfig)) as api:
        answer = await client.CoreV1Api(api).list_namespaced_event("longhorn-system")
        events = [api.sanitize_for_serialization(e) for e in answer.items]
    return [
        e
        for e in events
        if e["involvedObject"]["kind"] == "Volume" and e["source"].get("component", "").startswith("corral-")
    ]


def assert_one_trace_per_volume_patch(spans: list[ReceivedSpan], patched: int) -> None:
    """Every applied volume patch: actuator span → its decision span → a watcher span, one trace."""
    by_id = {span.span_id: span for span in spans}
    applied = [
        s
        for s in spans
        if s.service == "corral-actuator"
        and s.name == "actuate patch Volume"
        and s.attributes.get("corral.outcome") == "applied"
    ]
    assert len(applied) == patched, Counter(f"{s.service} {s.name}" for s in spans)
    for actuated in applied:
        decided = by_id[actuated.parent_span_id]
        assert (decided.service, decided.name) == ("corral-engine-upgrade", "decide Volume"), decided
        assert decided.attributes["corral.command.id"] == actuated.attributes["corral.command.id"]
        watched = by_id[decided.parent_span_id]
        assert watched.service == "corral-watcher" and watched.parent_span_id == "", watched
        assert actuated.trace_id == decided.trace_id == watched.trace_id


def replay_from_history(
    run: CorralRun, run_dir: Path, service: str, since: float
) -> subprocess.CompletedProcess[str]:
    """`corral replay SERVICE --nats … --since T` as the read-only user, while the run goes on: no
    recorder was started, the bus's own history (LH_HISTORY) holds the run."""
    return subprocess.run(
        python_module(
            "corral_cli",
            "replay",
            service,
            "--nats",
            f"nats://127.0.0.1:{run.nats_port}",
            "--since",
            f"{since:.6f}",
        ),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
        env={**os.environ, **RunNatsAuth(run_dir).cli_env(READER)},
    )


@pytest.mark.integration
def test_the_demo_shows_the_engine_upgrade_wave_until_it_is_over(tmp_path: Path) -> None:
    """`corral run` (stdout a pipe): the demo brings a new default engine image and prints the
    wave per owner node until every eligible volume is on it; the figures never show more in
    flight than the limit, and the last ones are what the cluster holds. With an OTLP collector
    named, every volume's patch is one trace across the three processes."""
    assert sandbox_available()
    receiver = OtlpReceiver().start()
    before_the_wave = time.time()
    run = start_corral_run(
        tmp_path,
        # a small demo: 2 nodes, 10 volumes (a degraded and a DR volume among them), quick upgrades;
        # the wave alone, so the cluster it leaves is the one its last figures describe
        *("--nodes", "2", "--volumes", "10"),
        *("--live-upgrade-seconds", "1", "--offline-upgrade-seconds", "0.3"),
        *("--otlp-endpoint", receiver.endpoint),
        *("--demo", "engine-upgrade"),
    )
    proc = run.proc
    try:
        output = Output(proc, tmp_path / "logs")
        seen = list(output.until("engine-upgrade wave ", DEMO_DEADLINE_S))
        summary = seen[-1]
        assert summary.startswith("engine-upgrade wave done"), summary
        assert f"on {DEMO_IMAGE}, blocked 2 (degraded 1, dr-volume 1)" in summary, summary

        rows = [m.groupdict() for m in map(FIGURES.match, seen) if m]
        wave_started = seen.index(next(line for line in seen if "default image " + DEMO_IMAGE in line))
        wave = [m.groupdict() for m in map(FIGURES.match, seen[wave_started:]) if m]
        assert any(int(r["in_flight"]) > 0 for r in wave if r["node"] != "total"), "no upgrade ever shown"
        for row in rows:
            if row["node"] != "total":
                assert int(row["in_flight"]) <= int(row["limit"]) == 2, row

        last = {row["node"]: row for row in rows}
        volumes = asyncio.run(emulator_volumes(tmp_path / "sandbox" / "kubeconfig"))
        expected: dict[str, dict[str, int]] = {}
        for volume in volumes:
            spec, status = volume["spec"], volume["status"]
            assert isinstance(spec, dict) and isinstance(status, dict)
            counts = expected.setdefault(str(status["ownerID"]), {"done": 0, "blocked": 0, "in_flight": 0})
            if spec["image"] != status["currentImage"]:
                counts["in_flight"] += 1
            elif spec["image"] == DEMO_IMAGE:
                counts["done"] += 1
            else:
                counts["blocked"] += 1  # not on the new image and nothing moving: held back
        for node, counts in expected.items():
            shown = last[node]
            assert (int(shown["in_flight"]), int(shown["waiting"])) == (0, 0), shown
            assert counts == {
                "done": int(shown["done"]),
                "blocked": int(shown["blocked"]),
                "in_flight": 0,
            }, (node, shown)
        assert int(last["total"]["done"]) == sum(c["done"] for c in expected.values()) == 8
        # Every Event corral recorded on a Volume names its uid: `kubectl describe` lists it.
        uids = {}
        for volume in volumes:
            meta = volume["metadata"]
            assert isinstance(meta, dict)
            uids[meta["name"]] = meta["uid"]
        events = asyncio.run(corral_volume_events(tmp_path / "sandbox" / "kubeconfig"))
        assert len(events) >= 8, events  # at least the started and completed of each upgrade
        for event in events:
            involved = event["involvedObject"]
            assert involved.get("uid") == uids[involved["name"]], (involved, event["reason"])

        # No recorder was started: the service's own decider, run again over the bus's history
        # from before the wave, makes exactly the commands the live one made.
        replay = replay_from_history(run, tmp_path, "engine-upgrade", before_the_wave)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert "passes: decided at the " in replay.stdout, replay.stdout
        assert "diff: 8 same, 0 changed, 0 missing, 0 extra" in replay.stdout, replay.stdout
        assert "version:" not in replay.stdout, replay.stdout

        proc.send_signal(signal.SIGINT)
        rest = "".join(output.until("", DEADLINE_S))
        assert proc.wait(timeout=DEADLINE_S) == 0, rest
        codes = rest.split("exit codes: ", 1)[1].split(")", 1)[0]
        assert all(item.endswith(" 0") for item in codes.split(", ")), rest
        # Each service exported what it had left when it stopped: the spans are all in.
        assert_one_trace_per_volume_patch(receiver.received(), patched=8)
        assert not (tmp_path / "events.jsonl").exists()  # one way to record: the bus's history
    finally:
        stop_leftovers(proc)
        receiver.stop()


async def setting_sync_state(kubeconfig: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The two demo Settings and the instance-manager pods, as the emulator holds them."""
    from kubernetes_asyncio import client

    async with connected(str(kubeconfig)) as api:
        objects = client.CustomObjectsApi(api)
        settings = {
            name: await objects.get_namespaced_custom_object(
                "longhorn.io", "v1beta2", "longhorn-system", "settings", name
            )
            for name in ("priority-class", "taint-toleration")
        }
        pods = await client.CoreV1Api(api).list_namespaced_pod(
            "longhorn-system", label_selector="longhorn.io/component=instance-manager"
        )
        return settings, [api.sanitize_for_serialization(p) for p in pods.items]


@pytest.mark.integration
def test_the_whole_demo_then_shows_settings_pending_until_the_detach(tmp_path: Path) -> None:
    """`corral run` with every demo: after a (tiny) engine-upgrade wave, priority-class and
    taint-toleration are changed while volumes are attached and shown pending with their blocker,
    the volumes detach, and both are shown applied, as the cluster then holds them."""
    assert sandbox_available()
    before = time.time()
    run = start_corral_run(
        tmp_path,
        *("--nodes", "2", "--volumes", "4"),
        *("--live-upgrade-seconds", "0.3", "--offline-upgrade-seconds", "0.1"),
    )
    proc = run.proc
    try:
        output = Output(proc, tmp_path / "logs")
        seen = output.until("engine-upgrade wave ", DEMO_DEADLINE_S)
        assert seen[-1].startswith("engine-upgrade wave done"), seen[-1]
        wave_end = len(seen)
        seen = output.until("setting-sync: priority-class and taint-toleration applied", DEMO_DEADLINE_S)
        part = seen[wave_end:]
        rows = [m.groupdict() for m in map(FIGURES.match, part) if m]
        for name in ("priority-class", "taint-toleration"):
            shown = [r for r in rows if r["node"] == name]
            assert shown and int(shown[0]["blocked"]) > 0, (name, part)  # pending, blocked first
            assert int(shown[-1]["blocked"]) == int(shown[-1]["in_flight"]) == 0, (name, part)
            blocker = re.compile(rf"s +{name}: attached-volumes: \d+ attached volumes?: ")
            assert any(blocker.search(line) for line in part), part
        detach = next(i for i, line in enumerate(part) if "demo: detaching the " in line)
        assert any("blocked" in line and "attached-volumes" in line for line in part[:detach]), part

        settings, pods = asyncio.run(setting_sync_state(tmp_path / "sandbox" / "kubeconfig"))
        assert all(s["status"]["applied"] is True for s in settings.values()), settings
        assert pods and {p["spec"].get("priorityClassName") for p in pods} == {"system-cluster-critical"}

        # Both demos decided again from the bus's history, with no recorder started before them.
        for service in ("setting-sync", "engine-upgrade"):
            replay = replay_from_history(run, tmp_path, service, before)
            # Messages as plain text, whole: a tuple's repr is cut short, and with it what differed.
            assert replay.returncode == 0, f"{service}:\n{replay.stdout}{replay.stderr}"
            # on the input each live pass had, not on stream time (decided_on.py)
            assert "passes: decided at the " in replay.stdout, f"{service}:\n{replay.stdout}"
            diff = replay.stdout.splitlines()[-1]
            assert re.fullmatch(r"diff: [1-9]\d* same, 0 changed, 0 missing, 0 extra: .*", diff), (
                f"{service}:\n{replay.stdout}"
            )

        proc.send_signal(signal.SIGINT)
        rest = "".join(output.until("", DEADLINE_S))
        assert proc.wait(timeout=DEADLINE_S) == 0, rest
    finally:
        stop_leftovers(proc)
