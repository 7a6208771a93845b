"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl on a temporary directory,
listening on loopback only, on a free port, with trust authentication; with ``tls``, also TLS
with a new self-signed certificate for 127.0.0.1 (made by the ``openssl`` command).

PostgreSQL refuses to run as root; when the tests run as root (as CI does) the cluster belongs to
the ``postgres`` system user and its commands run through ``runuser``.

Run as a script, it starts a cluster, prints its URL and stops it on Enter (for manual work).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in Debian's versioned PostgreSQL directory."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgServer:
    """One cluster; :meth:`url` gives URLs of databases created on it with :meth:`create_database`."""

    def __init__(self, tls: bool = False) -> None:
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        if not initdb or not pg_ctl:
            raise FileNotFoundError("PostgreSQL's initdb and pg_ctl were not found")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="copal-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.sockets = self.root / "sockets"
        self.sockets.mkdir()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.root, ignore_errors=True)
                raise FileNotFoundError("PostgreSQL refuses to run as root and there is no 'postgres' user") from None
            for path in (self.root, self.sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._databases = 0
        self.tls = tls
        # The server's certificate, which clients of a TLS cluster trust as their root.
        self.certificate = self.root / "server.crt"
        self._key = self.root / "server.key"

    def _run(self, *command: str) -> None:
        result = subprocess.run([*self._as_user, *command], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{command[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}{log}")

    def init(self) -> None:
        self._run(self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--no-sync")
        if self.tls:
            self._make_certificate()
        self.start()

    def _make_certificate(self) -> None:
        make_certificate(self.certificate, self._key)
        if self._as_user:
            user = pwd.getpwnam("postgres")
            for path in (self.certificate, self._key):
                os.chown(path, user.pw_uid, user.pw_gid)

    def start(self) -> None:
        # fsync off: a test cluster is thrown away, and fsync would dominate every commit.
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.sockets} -c fsync=off -c max_connections=200")
        if self.tls:
            options += f" -c ssl=on -c ssl_cert_file={self.certificate} -c ssl_key_file={self._key}"
        self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        psql = find_binary("psql") or "psql"
        result = subprocess.run([psql, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", self.url(database),
                                 "-c", sql], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"psql failed: {result.stderr}")
        return result.stdout

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        self._databases += 1
        name = f"copal_{self._databases}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url(name)

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def make_certificate(certificate: Path, key: Path) -> None:
    """A new self-signed certificate for 127.0.0.1 and its private key (readable by its owner only,
    as the server demands)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise FileNotFoundError("the openssl command was not found")
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(certificate)], check=True, capture_output=True, timeout=60)
    key.chmod(0o600)


def start_server(tls: bool = False) -> PgServer:
    server = PgServer(tls)
    try:
        server.init()
    except BaseException:
        shutil.rmtree(server.root, ignore_errors=True)
        raise
    return server


if __name__ == "__main__":
    server = start_server()
    print(server.url(), flush=True)
    try:
        input()
    finally:
        server.destroy()
