"""TLS for the security tests: a throw-away CA (trustme) and stunnel in front of the broker.

Tansu 0.6.0 cannot serve TLS itself: its `--cert` and `--key` flags sit in one exclusive clap
group, so passing both is refused and one alone leaves the listener in plaintext. stunnel, a
standard TLS terminator, takes TLS on one port and forwards to the broker, which advertises the
stunnel port, so every connection a client makes (bootstrap and then the partition leader) is
TLS, verified against the test CA.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trustme

from devstack.embedded import EmbeddedServerError, TlsFiles, _ServerProcess


@dataclass(frozen=True)
class Pki:
    """Server and client files from one CA (`server.ca`), and a CA that signed nothing of ours."""

    server: TlsFiles
    client: TlsFiles
    other_ca: Path


def make_pki(directory: Path) -> Pki:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    files = TlsFiles(cert=directory / "server.pem", key=directory / "server.key",
                     ca=directory / "ca.pem")  # fmt: skip
    leaf.private_key_pem.write_to_path(str(files.key))
    files.cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    ca.cert_pem.write_to_path(str(files.ca))
    client = TlsFiles(cert=directory / "client.pem", key=directory / "client.key", ca=files.ca)
    moderator = ca.issue_cert("moderator.clients.test")
    moderator.private_key_pem.write_to_path(str(client.key))
    client.cert.write_bytes(b"".join(blob.bytes() for blob in moderator.cert_chain_pems))
    other = directory / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    return Pki(server=files, client=client, other_ca=other)


class TlsTerminator(_ServerProcess):
    """stunnel: TLS on `port`, forwarded in plaintext to 127.0.0.1:`upstream_port`; with
    `require_client_cert`, only clients with a certificate from `tls.ca` get through (mTLS)."""

    name = "stunnel"

    def __init__(
        self,
        upstream_port: int,
        tls: TlsFiles,
        port: int | None = None,
        *,
        require_client_cert: bool = False,
    ) -> None:
        super().__init__(port)
        self.upstream_port = upstream_port
        self.tls = tls
        self.require_client_cert = require_client_cert
        self._dir = tempfile.TemporaryDirectory(prefix="stunnel-")

    def _command(self) -> list[str]:
        binary = shutil.which("stunnel4") or shutil.which("stunnel")
        if binary is None:
            raise EmbeddedServerError("stunnel is not installed: run `make install`")
        config = Path(self._dir.name) / "stunnel.conf"
        config.write_text(
            "foreground = yes\n"
            "pid =\n"
            "[kafka]\n"
            f"accept = 127.0.0.1:{self.port}\n"
            f"connect = 127.0.0.1:{self.upstream_port}\n"
            f"cert = {self.tls.cert}\n"
            f"key = {self.tls.key}\n"
            + (f"CAfile = {self.tls.ca}\nverifyChain = yes\nrequireCert = yes\n"
               if self.require_client_cert else "")
        )  # fmt: skip
        return [binary, str(config)]

    def stop(self, timeout_s: float = 5.0) -> None:
        super().stop(timeout_s)
        self._dir.cleanup()
