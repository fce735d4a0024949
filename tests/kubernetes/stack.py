"""A real Kubernetes control plane for tests: etcd + kube-apiserver + KWOK on loopback ports.

The binaries come from `scripts/kube-stack.sh build` (pinned Go modules in tools/kube/, cached
outside the repo by version). `KubeStack.start()` gives the API server self-signed certificates,
static-token authentication, RBAC (`--authorization-mode=Node,RBAC`) and the DRA API
(`resource.k8s.io/v1`), and starts KWOK, which makes nodes carrying the KWOK annotation Ready and
pods bound to them Running without a kubelet. `stop()` ends every process it started and removes
its temporary directory.

By hand: `.venv/bin/python -m tests.kubernetes.stack` starts the stack, prints the admin
kubeconfig's path and waits for Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "kube-stack.sh"
# KWOK manages only nodes carrying this annotation (what kwokctl puts on its fake nodes).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
ADMIN_USER = "tessera-test-admin"
BINARIES = ("kube-apiserver", "etcd", "kwok", "kwok-stages.yaml", "helm")
SERVICE_CIDR = "10.96.0.0/24"  # allocation range for ClusterIPs only: nothing is routed there


class StackUnavailable(RuntimeError):
    """The binaries could not be built, or the stack did not come up."""


def build_binaries(timeout: float = 3000.0) -> Path:
    """Run `scripts/kube-stack.sh build` (a no-op when the cache has them); the binary dir.
    TESSERA_KUBE_BIN names a directory of binaries built elsewhere instead (nothing is built)."""
    given = os.environ.get("TESSERA_KUBE_BIN", "")
    if given:
        missing = [n for n in BINARIES if not (Path(given) / n).is_file()]
        if missing:
            raise StackUnavailable(f"TESSERA_KUBE_BIN={given} lacks {', '.join(missing)}")
        return Path(given)
    if not _may_build():
        cached = _cached_dir()
        if cached is not None:
            return cached
        raise StackUnavailable(
            "the binaries are not built yet: `make kube-stack` builds them once (a cold build takes "
            "tens of minutes on 2 cores, docs/kubernetes.md); TESSERA_KUBE_BUILD=1 builds them here"
        )
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        raise StackUnavailable("no Go toolchain on PATH to build kube-apiserver, etcd and kwok")
    try:
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "build"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StackUnavailable(f"building the control plane took over {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise StackUnavailable(f"scripts/kube-stack.sh build failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _may_build() -> bool:
    """Whether this test run may start the (long) cold build: CI (TESSERA_REQUIRE_KUBE=1, whose
    .ci/run starts the build in the background first, so this waits on its lock) or on request
    (TESSERA_KUBE_BUILD=1). A newcomer's `make test` uses binaries already cached and skips otherwise."""
    return "1" in (os.environ.get("TESSERA_REQUIRE_KUBE"), os.environ.get("TESSERA_KUBE_BUILD"))


def _cached_dir() -> Path | None:
    """The cache directory of the pinned versions when every binary is in it, else None."""
    try:
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "dir"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    directory = Path(done.stdout.strip().splitlines()[-1])
    return directory if all((directory / name).is_file() for name in BINARIES) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> None:
    """A throwaway CA, the API server's serving certificate for 127.0.0.1 / localhost, and the
    ServiceAccount token signing key."""
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=tessera-test-ca",
        cwd=directory,
    )  # fmt: skip
    (directory / "serving.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr",
        "-subj", "/CN=kube-apiserver", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "serving.ext", "-out", "serving.crt",
        cwd=directory,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def kubeconfig_text(server: str, ca_file: Path, token: str, user: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    return json.dumps(config, indent=2)  # JSON is YAML: any kubeconfig reader takes it


@dataclass
class KubeStack:
    """One etcd, one kube-apiserver and one KWOK controller; `start()` then `stop()`."""

    bin_dir: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tessera-kube-")))
    etcd_port: int = 0
    apiserver_port: int = 0
    admin_token: str = field(default_factory=lambda: os.urandom(16).hex())
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def kubeconfig_for_token(self, token: str, user: str) -> Path:
        """A kubeconfig for another identity (e.g. a ServiceAccount token)."""
        path = self.workdir / f"{user.replace(':', '_')}.kubeconfig"
        path.write_text(kubeconfig_text(self.server, self.ca_file, token, user))
        return path

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> KubeStack:
        try:
            make_certificates(self.workdir)
            (self.workdir / "tokens.csv").write_text(
                f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            )
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            self._start_kwok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End every process (SIGTERM, then SIGKILL after 10 s) and remove the work directory."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self.processes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KubeStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- processes -----------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [str(self.bin_dir / name), *args],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop() ends it and its children
        )
        log.close()
        self.processes[name] = process
        return process

    def log_tail(self, name: str, size: int = 3000) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else ""

    def _wait(self, name: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        process = self.processes[name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StackUnavailable(
                    f"{name} exited with {process.returncode}: {self.log_tail(name)}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise StackUnavailable(f"{name} not ready within {timeout:.0f}s: {self.log_tail(name)}")

    def _start_etcd(self, timeout: float) -> None:
        self.etcd_port = free_port()
        peer = f"http://127.0.0.1:{free_port()}"
        self._spawn(
            "etcd",
            [
                "--name=test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}",
                "--unsafe-no-fsync",  # throwaway data: no fsync, far faster on a busy disk
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"{self.etcd_url}/health"), timeout)

    def _start_apiserver(self, timeout: float) -> None:
        self.apiserver_port = free_port()
        self.kubeconfig.write_text(
            kubeconfig_text(self.server, self.ca_file, self.admin_token, ADMIN_USER)
        )
        w = self.workdir
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={w / 'serving.crt'}",
                f"--tls-private-key-file={w / 'serving.key'}",
                f"--client-ca-file={w / 'ca.crt'}",
                f"--token-auth-file={w / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--runtime-config=resource.k8s.io/v1=true",
                # Watches read etcd itself, so compacting etcd (compact_etcd) makes a watch
                # from an older resourceVersion answer 410 Gone, as after a long disconnect.
                "--watch-cache=false",
                "--profiling=false",
                f"--cert-dir={w / 'certs'}",
                "--v=0",
            ],
        )
        self._wait("kube-apiserver", lambda: self._api_ok("/readyz"), timeout)

    def _start_kwok(self, timeout: float) -> None:
        kwok_port = free_port()
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.bin_dir / 'kwok-stages.yaml'}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
                f"--server-address=127.0.0.1:{kwok_port}",
                "--node-lease-duration-seconds=0",
            ],
        )
        self._wait("kwok", lambda: _http_ok(f"http://127.0.0.1:{kwok_port}/healthz"), timeout)

    # --- raw API access (for what the tests do outside the backend) -----------------------------

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """One HTTPS request to the API server; (status, parsed JSON body or text)."""
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=30) as resp:
                return resp.status, _parse(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _parse(exc.read())

    def _api_ok(self, path: str) -> bool:
        try:
            return self.request("GET", path)[0] == 200
        except (OSError, ssl.SSLError):
            return False

    def etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """etcd's v3 JSON gateway (e.g. /v3/kv/compaction), for what no Kubernetes API does."""
        req = urllib.request.Request(
            f"{self.etcd_url}{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return dict(json.loads(resp.read()))

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision: older resourceVersions answer 410 Gone."""
        revision = int(self.etcd("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        self.etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return raw.decode(errors="replace")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def main() -> None:
    stack = KubeStack(build_binaries())
    with stack:
        print(f"kube-apiserver {stack.server}; kubeconfig {stack.kubeconfig}")  # noqa: T201
        print("Ctrl-C stops it and removes its files.")  # noqa: T201
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
