"""A real PostgreSQL server on 127.0.0.1 for tests, and the PostgreSQL JDBC driver jar.

`postgres` (session fixture) initdb's a throwaway cluster, starts it on a free port (TCP on
127.0.0.1 only, its Unix socket inside the cluster's directory, never 5432), creates the
database `runner_test` owned by the role `runner` (password auth over TCP) and yields a
`PostgresServer`. At the end of the session it stops the server and deletes the cluster. Its
`wal_level` is `logical`, for the Debezium rig (tests/debezium.py), which makes a database and
a role of its own through `as_superuser()`.

What it needs: the server binaries (Debian: package `postgresql`, /usr/lib/postgresql/*/bin)
and the driver jar (Debian: `libpostgresql-jdbc-java`, /usr/share/java/postgresql.jar).
`./dev test` installs them (as root with apt-get); fixtures install nothing, and when one is
missing the tests skip and say what to install. PG_BINDIR points at other server binaries.

Use it through tests/conftest.py (`from tests.postgres import postgres`): a fixture imported into
several test modules is a separate fixture in each, and would start one server per module.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

JAR = "/usr/share/java/postgresql.jar"
DATABASE = "runner_test"
USER = "runner"
OS_USER = "postgres"  # the server refuses to run as root; Debian's package creates this user
SERVER_TOOLS = ("initdb", "pg_ctl", "psql")


class PsqlError(RuntimeError):
    """psql exited non-zero; the message carries its stderr."""


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    database: str
    user: str
    password: str
    jar: str
    bindir: str = field(repr=False)

    @property
    def url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @property
    def properties(self) -> dict[str, str]:
        """For spark.read.jdbc(url, table, properties=...)."""
        return {"user": self.user, "password": self.password, "driver": "org.postgresql.Driver"}

    def execute(self, sql: str) -> None:
        """Run SQL statements (a script: several statements, each in autocommit) as `runner`."""
        self._psql(["-f", "-"], stdin=sql)

    def query(self, sql: str) -> list[tuple[str, ...]]:
        """Rows of one query as text (psql -At); NULL comes back as ''."""
        out = self._psql(["-A", "-t", "-F", "\t", "-c", sql])
        if not out:
            return []
        return [tuple(line.split("\t")) for line in out.removesuffix("\n").split("\n")]

    def _psql(self, args: list[str], stdin: str | None = None) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(PGPASSWORD=self.password, PGCONNECT_TIMEOUT="10")
        cmd = [os.path.join(self.bindir, "psql"), "-X", "-q", "-w", "-v", "ON_ERROR_STOP=1"]
        cmd += ["-h", self.host, "-p", str(self.port), "-U", self.user, "-d", self.database]
        res = subprocess.run(
            cmd + args, input=stdin, env=env, capture_output=True, text=True, timeout=300
        )
        if res.returncode != 0:
            raise PsqlError(f"psql exited {res.returncode}: {res.stderr.strip()}")
        return res.stdout


# ---------------------------------------------------------------- finding and installing


def _server_bindir() -> str | None:
    """The newest PostgreSQL server bin directory that has initdb, pg_ctl and psql."""
    candidates = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(os.environ["PG_BINDIR"])
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(versions, key=_version_key, reverse=True)
    if shutil.which("initdb"):
        candidates.append(os.path.dirname(os.path.realpath(shutil.which("initdb") or "")))
    for bindir in candidates:
        if all(os.access(os.path.join(bindir, t), os.X_OK) for t in SERVER_TOOLS):
            return bindir
    return None


def _version_key(bindir: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", bindir))


def jdbc_jar() -> str | None:
    """The PostgreSQL JDBC driver jar, None when absent.

    Starts no server: for the shared `spark` fixture's spark.jars.
    """
    return JAR if os.path.exists(JAR) else None


def _find() -> tuple[str, str]:
    """(server bin dir, jar path), or pytest.skip saying what is missing."""
    bindir = _server_bindir()
    if bindir is None or not os.path.exists(JAR):
        what = []
        if bindir is None:
            what.append(
                "PostgreSQL server binaries (initdb, pg_ctl, psql; looked in "
                "/usr/lib/postgresql/*/bin, $PG_BINDIR and PATH)"
            )
        if not os.path.exists(JAR):
            what.append(f"the PostgreSQL JDBC driver {JAR}")
        pytest.skip(
            f"missing {' and '.join(what)}: `./dev test` installs them when run as root with "
            "apt-get; or `sudo apt-get install -y postgresql libpostgresql-jdbc-java`"
        )
    return bindir, JAR


# ---------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Cluster:
    """A cluster in its own temp dir, run by an unprivileged OS user."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                self.owner: pwd.struct_passwd | None = pwd.getpwnam(OS_USER)
            except KeyError:
                pytest.skip(
                    f"running as root and there is no `{OS_USER}` user to run PostgreSQL "
                    f"(it refuses root); `apt-get install postgresql` creates one"
                )
        else:
            self.owner = None
        # Not under pytest's basetemp: that is root-only (0700) and pytest resets it to 0700
        # when another pytest session starts, which would lock the server's user out.
        self.base = Path(tempfile.mkdtemp(prefix="runner-pg-"))
        self.data = self.base / "data"
        self.sockets = self.base / "sock"
        self.log = self.base / "server.log"
        self.sockets.mkdir()
        self.port = 0
        if self.owner:
            for p in (self.base, self.sockets):
                os.chown(p, self.owner.pw_uid, self.owner.pw_gid)

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a server tool as the cluster's OS user."""
        cmd = [os.path.join(self.bindir, tool), *args]
        if self.owner:
            cmd = ["runuser", "-u", self.owner.pw_name, "--", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        return subprocess.run(
            cmd,
            cwd=self.base,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    def check(self, tool: str, *args: str) -> str:
        res = self.run(tool, *args)
        if res.returncode != 0:
            raise RuntimeError(
                f"{tool} exited {res.returncode}: {res.stderr.strip() or res.stdout.strip()}"
                f"\n--- {self.log} ---\n{self._log_tail()}"
            )
        return res.stdout

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"

    def init(self) -> None:
        self.check(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-locale",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
        )
        # Local (socket) connections: trust; the socket's directory is the cluster owner's
        # alone. TCP: 127.0.0.1 only, with a password.
        hba = "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
        (self.data / "pg_hba.conf").write_text(hba)
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.sockets}'",
            "password_encryption": "'scram-sha-256'",
            "max_connections": "50",
            "shared_buffers": "'32MB'",
            "timezone": "'UTC'",
            # A throwaway cluster: durability buys nothing, and costs I/O on a shared box.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            # Logical decoding for the Debezium tests (tests/debezium.py): on the one server,
            # as starting a second costs seconds; the JDBC tests never see the difference
            # (a little more WAL per UPDATE and DELETE, nothing they read).
            "wal_level": "logical",
            "max_replication_slots": "4",
            "max_wal_senders": "4",
        }
        with (self.data / "postgresql.conf").open("a") as f:
            f.write("\n# runner tests\n" + "".join(f"{k} = {v}\n" for k, v in conf.items()))

    def start(self) -> None:
        for attempt in range(5):
            self.port = _free_port()
            res = self.run(
                "pg_ctl",
                "start",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {self.port}",
            )
            if res.returncode == 0:
                return
            # Someone took the port between our probe and the server's bind: try another.
            if "already in use" not in self._log_tail() or attempt == 4:
                raise RuntimeError(
                    f"pg_ctl start exited {res.returncode}: {res.stderr.strip()}"
                    f"\n--- {self.log} ---\n{self._log_tail()}"
                )

    def superuser_sql(self, *statements: str) -> None:
        """Each statement on its own (CREATE DATABASE cannot run in a transaction block)."""
        args = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.sockets)]
        args += ["-p", str(self.port), "-U", "postgres", "-d", "postgres"]
        for s in statements:
            args += ["-c", s]
        self.check("psql", *args)

    def stop(self) -> None:
        """Stop the server (fast: disconnect clients, no waiting) and delete the cluster."""
        try:
            if (self.data / "postmaster.pid").exists():
                res = self.run(
                    "pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "30"
                )
                if res.returncode != 0:
                    self._kill()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _kill(self) -> None:
        """pg_ctl could not stop it: signal the postmaster ourselves."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        for sig, wait in ((signal.SIGQUIT, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.1)


class _Shared:
    """One server however many modules end up holding the fixture (see the module docstring)."""

    server: PostgresServer | None = None
    cluster: _Cluster | None = None
    users = 0


def as_superuser(*statements: str) -> None:
    """Run statements, each on its own, as the superuser `postgres` on the session's server
    (through its Unix socket): for fixtures built on `postgres` that need a role or a
    database of their own (tests/debezium.py)."""
    if _Shared.cluster is None:
        raise RuntimeError("as_superuser() needs the `postgres` fixture's server running")
    _Shared.cluster.superuser_sql(*statements)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL server with database `runner_test` owned by role `runner`."""
    if _Shared.server is None:
        bindir, jar = _find()
        cluster = _Cluster(bindir)
        try:
            cluster.init()
            cluster.start()
            password = secrets.token_hex(12)
            cluster.superuser_sql(
                f"CREATE ROLE {USER} LOGIN PASSWORD '{password}'",
                f"CREATE DATABASE {DATABASE} OWNER {USER}",
            )
        except BaseException:
            cluster.stop()
            raise
        _Shared.cluster = cluster
        _Shared.server = PostgresServer(
            host="127.0.0.1",
            port=cluster.port,
            database=DATABASE,
            user=USER,
            password=password,
            jar=jar,
            bindir=bindir,
        )
    _Shared.users += 1
    try:
        yield _Shared.server
    finally:
        _Shared.users -= 1
        if _Shared.users == 0 and _Shared.cluster is not None:
            cluster, _Shared.cluster, _Shared.server = _Shared.cluster, None, None
            cluster.stop()
