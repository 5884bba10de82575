"""Real services for the integration tests, started here when not already running.

The tier also holds the tests that use embedded Chroma, the local model, a subprocess or
a loopback server without these fixtures (docs/testing.md says which tests go where).

- PostgreSQL: a throwaway cluster (``initdb`` + ``pg_ctl``) in a temporary folder on a
  free loopback port, run as the ``postgres`` OS user when the tests run as root (initdb
  refuses root). Each test gets its own database, dropped afterwards.
- Chroma: ``chroma run --path TMP --host 127.0.0.1 --port FREE`` in its own process
  group, ready when ``/api/v2/heartbeat`` answers, stopped with SIGTERM to the group.

``SEMANTIC_RECALL_TEST_PG_URL`` (a server whose user may create databases) and
``SEMANTIC_RECALL_TEST_CHROMA_URL`` use running services instead. Nothing is mocked.
The helpers are plain classes so that ``benchmarks/scale_backends.py`` can start the same
services.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

PG_URL_ENV = "SEMANTIC_RECALL_TEST_PG_URL"
CHROMA_URL_ENV = "SEMANTIC_RECALL_TEST_CHROMA_URL"
_PG_USER_FALLBACK = "semantic_recall_pg"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listens_on(group: int, port: int) -> bool:
    """Whether a process of process group `group` listens on TCP `port` (Linux's /proc).

    Where /proc cannot tell (another system), True: the heartbeat alone decides.
    """
    try:
        sockets: set[str] = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    except OSError:
        return True
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            # the process group is the 5th field, counted after the parenthesised name
            if int(Path(stat).read_text().rsplit(")", 1)[1].split()[2]) != group:
                continue
            folder = Path(stat).parent / "fd"
            if any(os.readlink(fd) in sockets for fd in folder.iterdir()):
                return True
        except (OSError, ValueError, IndexError):
            continue  # a process that exited meanwhile
    return False


def wait_until(condition: object, *, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``condition()`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except Exception:  # a service still starting refuses connections
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)  # polling interval of a condition with a deadline


def run_at_once(jobs: Sequence[Callable[[], object]], *, timeout: float = 300) -> None:
    """Run every job on its own thread, all released at once; fail with what any raised.

    For the concurrency tests: the threads meet at a barrier first, so the jobs overlap.
    """
    start = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        try:
            start.wait(timeout=60)
            job()
        except BaseException as exc:  # collected: the test fails with it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), f"a job ran over {timeout:.0f} s"
    assert errors == [], [traceback.format_exception(error) for error in errors]


def _pg_bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError(
            "PostgreSQL is not installed: apt-get install -y postgresql (.ci/run does it)"
        )
    return Path(candidates[-1]).parent


def _service_user() -> str | None:
    """The OS user that runs PostgreSQL: None when not root, else postgres (or our own)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", _PG_USER_FALLBACK):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    subprocess.run(["useradd", "--system", "--no-create-home", _PG_USER_FALLBACK], check=True)
    return _PG_USER_FALLBACK


class PostgresCluster:
    """A throwaway PostgreSQL cluster: ``start()``, ``url(database)``, ``stop()``."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.user = _service_user()
        self.root = Path(tempfile.mkdtemp(prefix="semantic-recall-pg-"))
        self.port = 0

    def _as_user(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self.user, "--", *argv] if self.user else list(argv)

    def start(self) -> PostgresCluster:
        if self.user:
            shutil.chown(self.root, self.user)
        data = self.root / "data"
        initdb = [str(self.bindir / "initdb"), "-N", "-D", str(data), "-U", "postgres"]
        initdb += ["--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]
        subprocess.run(self._as_user(*initdb), check=True, capture_output=True)
        for _ in range(3):  # a port taken between free_port() and start: try another
            self.port = free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
            )
            pg_ctl = [str(self.bindir / "pg_ctl"), "-D", str(data), "-o", options]
            pg_ctl += ["-l", str(self.root / "server.log"), "-w", "-t", "60", "start"]
            started = subprocess.run(self._as_user(*pg_ctl), check=False, capture_output=True)
            if started.returncode == 0:
                return self
        log = (self.root / "server.log").read_text(errors="replace")
        raise RuntimeError(f"PostgreSQL did not start:\n{log[-2000:]}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            pg_ctl = [str(self.bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            subprocess.run(self._as_user(*pg_ctl), check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def create_database(admin_url: str) -> str:
    """A new empty database on the server of ``admin_url`` (a URL); returns its URL."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))


def drop_database(admin_url: str, url: str) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def chroma_heartbeat(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2) as answer:
        return bool(answer.status == 200)


class ChromaServer:
    """``chroma run`` on a free loopback port, in its own process group."""

    def __init__(self, path: Path | None = None, port: int | None = None) -> None:
        self.path = path or Path(tempfile.mkdtemp(prefix="semantic-recall-chroma-"))
        self._port_fixed = port is not None  # the caller's, or once started: no other
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ChromaServer:
        """Start the server; on a port taken meanwhile, on another (unless it is fixed)."""
        chroma = Path(sys.executable).parent / "chroma"
        command = str(chroma) if chroma.exists() else (shutil.which("chroma") or "chroma")
        argv = [command, "run", "--path", str(self.path), "--host", "127.0.0.1"]
        for attempt in range(3):  # a port taken between free_port() and start: try another
            if attempt:
                self.port = free_port()
            log = (self.path.parent / f"{self.path.name}.log").open("ab")
            process = subprocess.Popen(
                [*argv, "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            self.process = process

            def settled(process: subprocess.Popen[bytes] = process) -> bool:
                # Another test's server on the same port answers the heartbeat too: a
                # test that stopped "its" server then talked to that one (a CI flake).
                exited = process.poll() is not None
                return exited or (chroma_heartbeat(self.url) and listens_on(process.pid, self.port))

            try:
                wait_until(settled, timeout=timeout, what=f"the Chroma server at {self.url}")
            except TimeoutError:
                self.stop(remove=True)
                raise
            if process.poll() is None:
                self._port_fixed = True  # a restart comes back where its clients look
                return self
            self.process = None
            if self._port_fixed:
                break
        self.stop(remove=True)
        raise RuntimeError(f"chroma run exited with {process.returncode} (port {self.port})")

    def stop(self, *, remove: bool = False) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=15)
        if remove:
            shutil.rmtree(self.path, ignore_errors=True)
            Path(self.path.parent / f"{self.path.name}.log").unlink(missing_ok=True)


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A PostgreSQL server for the session (ours, unless SEMANTIC_RECALL_TEST_PG_URL)."""
    if os.environ.get(PG_URL_ENV):
        yield os.environ[PG_URL_ENV]
        return
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster.url()
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    url = create_database(pg_admin_url)
    yield url
    drop_database(pg_admin_url, url)


@pytest.fixture(scope="session")
def chroma_url() -> Iterator[str]:
    """A Chroma server for the session (ours, unless SEMANTIC_RECALL_TEST_CHROMA_URL)."""
    if os.environ.get(CHROMA_URL_ENV):
        yield os.environ[CHROMA_URL_ENV].rstrip("/")
        return
    server = ChromaServer()
    try:
        yield server.start().url
    finally:
        server.stop(remove=True)


@pytest.fixture
def chroma_server() -> Iterator[ChromaServer]:
    """A Chroma server of this test alone (to stop and restart it)."""
    server = ChromaServer()
    try:
        yield server.start()
    finally:
        server.stop(remove=True)
