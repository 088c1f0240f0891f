"""A throwaway PostgreSQL server for tests, benchmarks and CI (never for production data).

``ThrowawayServer`` runs ``initdb`` into a fresh temporary directory, starts the cluster
with ``pg_ctl`` listening only on a Unix socket inside that directory (no TCP port, so
nothing else on the machine can reach it and two servers never collide), creates one
database and returns its URL; ``stop()`` shuts the cluster down and removes the
directory; ``restart()`` ends every connection as a failover would. The server binaries
are found by path, not through Python: ``$SESSIONLEDGER_PG_BIN``,
then ``initdb`` on ``PATH``, then the newest ``/usr/lib/postgresql/*/bin`` (Debian's
layout, which ``apt-get install postgresql`` provides without touching ``PATH``).

PostgreSQL refuses to run as root. When this process is root, the cluster runs as the
operating-system user ``$SESSIONLEDGER_PG_OS_USER``, else ``postgres`` (created by the
Debian packages), else ``nobody``; the temporary directory is handed to that user.

``pg_url()`` is what test suites and benchmarks call: ``$SESSIONLEDGER_PG_URL`` when set
(an existing server), otherwise a throwaway server started on demand. When no server can
be started, ``ServerUnavailable`` says why, in words a skip message can carry.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote_plus

__all__ = [
    "PG_URL_ENV",
    "ServerUnavailable",
    "ThrowawayServer",
    "drop_schema",
    "find_bindir",
    "pg_url",
    "with_options",
]

#: Environment variable naming an existing server to use instead of a throwaway one.
PG_URL_ENV: Final = "SESSIONLEDGER_PG_URL"
#: Environment variable naming the directory of ``initdb``/``pg_ctl``/``postgres``.
PG_BIN_ENV: Final = "SESSIONLEDGER_PG_BIN"
#: Environment variable naming the operating-system user the cluster runs as under root.
PG_OS_USER_ENV: Final = "SESSIONLEDGER_PG_OS_USER"

_TOOLS: Final = ("initdb", "pg_ctl", "postgres", "createdb")
_PORT: Final = 5432  # only names the socket file: the directory is private to this server
_ROLE: Final = "sessionledger"
_START_TIMEOUT_S: Final = 60


class ServerUnavailable(RuntimeError):
    """No throwaway server could be started here; the message says why."""


def _has_tools(directory: str | os.PathLike[str]) -> bool:
    return all(os.access(os.path.join(directory, tool), os.X_OK) for tool in _TOOLS)


def _version_key(directory: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", Path(directory).parent.name)
    return tuple(int(part) for part in parts)


def find_bindir() -> Path | None:
    """Return the directory holding the PostgreSQL server binaries, or None."""
    named = os.environ.get(PG_BIN_ENV)
    if named:
        return Path(named) if _has_tools(named) else None
    initdb = shutil.which("initdb")
    if initdb is not None:
        directory = Path(initdb).resolve().parent
        if _has_tools(directory):
            return directory
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    candidates += ["/usr/local/pgsql/bin", "/usr/pgsql/bin"]
    for candidate in candidates:
        if _has_tools(candidate):
            return Path(candidate)
    return None


def _server_user() -> pwd.struct_passwd | None:
    """Return the account the cluster runs as, or None to run as this process's user."""
    if os.geteuid() != 0:
        return None
    names = [os.environ.get(PG_OS_USER_ENV) or "", "postgres", "nobody"]
    for name in filter(None, names):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ServerUnavailable(
        "running as root, and there is no 'postgres' or 'nobody' account to run the "
        f"PostgreSQL server as (set {PG_OS_USER_ENV})"
    )


class ThrowawayServer:
    """Start a private PostgreSQL cluster in a temporary directory; stop and remove it.

    ``durable=False`` (tests) turns off ``fsync`` and full-page writes: a crash of the
    machine loses the throwaway data, which is the point of it. Benchmarks pass
    ``durable=True`` so commits cost what they cost in production. Use it as a context
    manager or call ``start()`` / ``stop()``; ``stop()`` is idempotent and also runs at
    interpreter exit.
    """

    def __init__(
        self, *, durable: bool = False, database: str = "sessionledger", max_connections: int = 300
    ) -> None:
        self.durable = durable
        self.database = database
        self.max_connections = max_connections
        self._bindir: Path | None = None
        self._base: Path | None = None
        self._user: pwd.struct_passwd | None = None
        self._running = False
        self.url: str | None = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def data_directory(self) -> Path | None:
        """The cluster's data directory while it exists (what a test may search)."""
        return None if self._base is None else self._base / "data"

    @property
    def log_path(self) -> Path | None:
        """The server's log file while it exists."""
        return None if self._base is None else self._base / "server.log"

    def _run(self, command: list[str], *, as_server: bool) -> subprocess.CompletedProcess[str]:
        assert self._bindir is not None
        command = [str(self._bindir / command[0]), *command[1:]]
        options: dict[str, Any] = {}
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        if as_server and self._user is not None:
            options = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
            env["HOME"] = str(self._base)
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
            timeout=_START_TIMEOUT_S * 2,
            cwd=self._base,
            **options,
        )

    def _make_base(self) -> Path:
        """Create the temporary directory, owned by the server's user and reachable by it."""
        roots = [tempfile.gettempdir(), "/tmp", "/var/tmp"]
        for root in dict.fromkeys(roots):
            try:
                base = Path(tempfile.mkdtemp(prefix="sessionledger-pg-", dir=root))
            except OSError:
                continue
            if self._user is None:
                return base
            os.chown(base, self._user.pw_uid, self._user.pw_gid)
            probe = subprocess.run(
                ["/bin/sh", "-c", 'test -w "$0" && test -x "$0"', str(base)],
                user=self._user.pw_uid,
                group=self._user.pw_gid,
                extra_groups=[],
                check=False,
                capture_output=True,
            )
            if probe.returncode == 0:
                return base
            shutil.rmtree(base, ignore_errors=True)
        raise ServerUnavailable(
            "found no temporary directory the PostgreSQL server's user can write to"
        )

    def start(self) -> str:
        """Start the server (once) and return the URL of its database."""
        if self.url is not None:
            return self.url
        self._bindir = find_bindir()
        if self._bindir is None:
            raise ServerUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl, postgres) were found on PATH, "
                f"in ${PG_BIN_ENV} or under /usr/lib/postgresql/*/bin; install them with "
                "'apt-get install -y postgresql', or point "
                f"${PG_URL_ENV} at a running server"
            )
        self._user = _server_user()
        self._base = self._make_base()
        atexit.register(self.stop)
        try:
            return self._start_cluster()
        except BaseException:
            self.stop()
            raise

    def _start_cluster(self) -> str:
        assert self._base is not None
        data = self._base / "data"
        initdb = self._run(
            [
                "initdb",
                "--pgdata",
                str(data),
                "--username",
                _ROLE,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
                "--no-instructions",
            ],
            as_server=True,
        )
        if initdb.returncode != 0:
            raise ServerUnavailable(f"initdb failed: {_last_lines(initdb.stderr + initdb.stdout)}")
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self._base}'",
            "unix_socket_permissions": "0700",
            "port": str(_PORT),
            "max_connections": str(self.max_connections),
            "shared_buffers": "'128MB'",
            "fsync": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "synchronous_commit": "on",
            "log_min_messages": "warning",
            "log_min_error_statement": "panic",
        }
        with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# sessionledger throwaway server\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
        assert self.log_path is not None
        started = self._run(
            [
                "pg_ctl",
                "--pgdata",
                str(data),
                "--log",
                str(self.log_path),
                "--wait",
                "--timeout",
                str(_START_TIMEOUT_S),
                "start",
            ],
            as_server=True,
        )
        self._running = True  # pg_ctl may have started it even when it reports a failure
        if started.returncode != 0:
            log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            raise ServerUnavailable(
                f"pg_ctl could not start the server: {_last_lines(started.stderr + log)}"
            )
        created = self._run(
            [
                "createdb",
                "--host",
                str(self._base),
                "--port",
                str(_PORT),
                "--username",
                _ROLE,
                self.database,
            ],
            as_server=True,
        )
        if created.returncode != 0:
            raise ServerUnavailable(f"createdb failed: {_last_lines(created.stderr)}")
        self.url = f"postgresql://{_ROLE}@/{self.database}?host={self._base}&port={_PORT}"
        return self.url

    def restart(self) -> None:
        """Restart the running server (``pg_ctl restart --mode fast``): every connection
        is ended, as by a failover or an administrator, and the data stays."""
        if not self._running or self._base is None or self.log_path is None:
            raise ServerUnavailable("the server is not running")
        restarted = self._run(
            [
                "pg_ctl",
                "--pgdata",
                str(self._base / "data"),
                "--log",
                str(self.log_path),
                "--mode",
                "fast",
                "--wait",
                "--timeout",
                str(_START_TIMEOUT_S),
                "restart",
            ],
            as_server=True,
        )
        if restarted.returncode != 0:
            raise ServerUnavailable(
                f"pg_ctl could not restart the server: {_last_lines(restarted.stderr)}"
            )

    def stop(self) -> None:
        """Stop the server and delete its directory (safe to call more than once)."""
        base, self._base = self._base, None
        if base is None:
            return
        if self._running:
            self._running = False
            self._base = base
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run(
                    ["pg_ctl", "--pgdata", str(base / "data"), "--mode", "fast", "--wait", "stop"],
                    as_server=True,
                )
            self._base = None
        self.url = None
        shutil.rmtree(base, ignore_errors=True)


def _last_lines(text: str, count: int = 6) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "(no output)"


def pg_url(server: ThrowawayServer | None = None) -> str:
    """Return ``$SESSIONLEDGER_PG_URL`` or start *server* (a new throwaway one by default).

    Raises ``ServerUnavailable`` when neither is possible.
    """
    named = os.environ.get(PG_URL_ENV, "").strip()
    if named:
        return named
    return (server or ThrowawayServer()).start()


def with_options(url: str, **options: object) -> str:
    """Return *url* with query parameters appended (``schema=``, ``pool_max_size=``…)."""
    extra = "&".join(f"{name}={quote_plus(str(value))}" for name, value in options.items())
    if not extra:
        return url
    return f"{url}{'&' if '?' in url else '?'}{extra}"


async def drop_schema(url: str, schema: str) -> None:
    """Drop *schema* and everything in it from the database of *url* (a store URL)."""
    import asyncpg

    from sessionledger_postgres.plugin import parse_postgres_url
    from sessionledger_postgres.schema import quote

    conn = await asyncpg.connect(parse_postgres_url(url)[0])
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")
    finally:
        await conn.close()
