"""Chroma as a server: `chroma run` (or Chroma's distributed deployment) over HTTP.

`ChromaServerVectorIndex` is the package's Chroma index on a `chromadb.HttpClient`:
the same collections, the same metadata and the same behaviour as the embedded client,
so an index moves between the two unchanged. The client is only built once the server
answers its heartbeat (`HttpClient` talks to the server in its constructor).

The async twins run the HTTP client in an executor, as for embedded Chroma. Chroma's
`AsyncHttpClient` was measured and left out: on a local server, 50 concurrent filtered
queries took 106 ms through it against 126 ms one after another through `HttpClient`
(the server is the bottleneck, not the client), while a second code path would have to
mirror every detail of `ChromaVectorIndex` (collection layout, metadata checks) to
stay interchangeable with it.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from langchain_semantic_recall.errors import InvalidOptionError, StorageError
from langchain_semantic_recall.executor import run_in_executor
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_clients import own
from langchain_semantic_recall.vectors.chroma_workarounds.http_close import HttpResources

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

__all__ = ["ChromaServerVectorIndex", "ChromaURL", "connect_chroma", "wait_for_chroma"]

logger = logging.getLogger(__name__)

HEARTBEAT_PATH = "/api/v2/heartbeat"
DEFAULT_REQUEST_TIMEOUT = 60.0
"""Seconds a request to the server may take (a write of Chroma's largest batch included)."""
_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class ChromaURL:
    """Where a Chroma server listens, parsed from `http(s)://host[:port][?options]`."""

    host: str
    port: int
    ssl: bool
    tenant: str | None = None
    """`?tenant=`: the Chroma tenant (None: the server's default)."""
    database: str | None = None
    """`?database=`: the Chroma database (None: the server's default)."""
    request_timeout: float | None = None
    """`?request_timeout=`: seconds a request may take (None: not given)."""

    @classmethod
    def parse(cls, url: str) -> ChromaURL:
        """Parse `http://host:port` (port 8000 by default, 443 for https).

        The query may name the `tenant`, the `database` and the `request_timeout`
        (seconds), what the command line and `SemanticRecall.from_url` cannot pass
        otherwise. Anything else (a path, another parameter, a fragment, credentials)
        would not reach the client, so it is refused rather than dropped (a misspelt
        `?databse=` ignored would write into Chroma's default database).

        Raises:
            InvalidOptionError: not an http(s) URL with a host, or one carrying more.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidOptionError(
                f"a Chroma server URL looks like http://127.0.0.1:8000, got {_shown(url)!r}"
            )
        ssl = parts.scheme == "https"
        try:
            port = parts.port or (443 if ssl else 8000)
        except ValueError as exc:
            raise InvalidOptionError(f"bad port in Chroma server URL {_shown(url)!r}") from exc
        options = _url_options(url, parts.query)
        extra = [
            what
            for what, given in (
                ("a path", parts.path not in ("", "/")),
                ("a fragment", bool(parts.fragment)),
                ("credentials", "@" in parts.netloc),
            )
            if given
        ]
        if extra:
            raise InvalidOptionError(
                f"the Chroma server URL {_shown(url)!r} carries {' and '.join(extra)}, which "
                "it cannot pass on: give http(s)://host:port, with ?tenant=, ?database= or "
                "?request_timeout= if needed, and an auth token from Python, as "
                "ChromaServerVectorIndex(url, headers={'x-chroma-token': ...})"
            )
        return cls(parts.hostname, port, ssl, **options)

    @property
    def url(self) -> str:
        """The server's URL (`http://host:port`, IPv6 hosts bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.ssl else 'http'}://{host}:{self.port}"


_URL_OPTIONS = ("tenant", "database", "request_timeout")


def _url_options(url: str, query: str) -> dict[str, Any]:
    """The `?tenant=`, `?database=` and `?request_timeout=` of a Chroma server URL."""
    pairs = parse_qsl(query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    wrong = sorted({n for n in names if n not in _URL_OPTIONS or names.count(n) > 1})
    if wrong:
        raise InvalidOptionError(
            f"the Chroma server URL {_shown(url)!r} gives {', '.join(wrong)}: it takes "
            f"{', '.join(_URL_OPTIONS)}, each once"
        )
    options: dict[str, Any] = {}
    for name, value in pairs:
        if name != "request_timeout":
            if not value.strip():
                raise InvalidOptionError(f"the Chroma server URL {_shown(url)!r}: empty {name}")
            options[name] = value
            continue
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            raise InvalidOptionError(
                f"the Chroma server URL {_shown(url)!r}: request_timeout is a number of "
                f"seconds above 0, got {value!r}"
            )
        options[name] = seconds
    return options


def _one(name: str, given: str | None, in_url: str | None) -> str | None:
    """The tenant or database, from the argument or the URL; both, they must agree."""
    if given is not None and in_url is not None and given != in_url:
        raise InvalidOptionError(f"{name}={given!r} and the URL's ?{name}={in_url!r} differ")
    return given if given is not None else in_url


def _shown(url: str) -> str:
    """`url` without any credentials in it (for messages)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _heartbeat(url: str, headers: Mapping[str, str], timeout: float) -> _Down | None:
    """None when the heartbeat answers; else why not, and whether waiting may help.

    A refused, reset or timed-out connection, or a host name not known yet (a container
    not started), is a server that may be starting. Credentials refused, a TLS handshake
    that fails, or an answer that is not Chroma's heartbeat will not change by waiting.
    """
    request = urllib.request.Request(url + HEARTBEAT_PATH, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as refused:
        if refused.code in (502, 503, 504):  # a proxy before a server still starting
            return _Down(f"it answered {refused.code}", wait=True)
        if refused.code in (401, 403):
            return _Down(f"it refused the credentials ({refused.code}): check the token")
        return _Down(f"it answered {refused.code} to {HEARTBEAT_PATH}: not a Chroma server?")
    except urllib.error.URLError as failed:
        if isinstance(failed.reason, ssl.SSLError):
            return _Down(f"the TLS handshake failed ({failed.reason.reason}): http or https?")
        if isinstance(failed.reason, socket.gaierror):
            return _Down(f"its host name does not resolve ({failed.reason.strerror})", wait=True)
        return _Down(str(failed.reason), wait=True)
    except ValueError:
        return _Down(f"its answer to {HEARTBEAT_PATH} is not JSON: not a Chroma server?")
    except http.client.HTTPException as garbled:  # another protocol's port
        return _Down(f"it does not speak HTTP ({type(garbled).__name__}): is the port Chroma's?")
    except OSError as failed:
        return _Down(str(failed) or type(failed).__name__, wait=True)
    if not isinstance(body, dict):
        return _Down(f"its answer to {HEARTBEAT_PATH} is not Chroma's heartbeat")
    return None


@dataclass(frozen=True)
class _Down:
    """Why a heartbeat failed, and whether the server may yet answer (`wait`)."""

    why: str
    wait: bool = False


def wait_for_chroma(
    url: str, *, timeout: float = 30.0, headers: Mapping[str, str] | None = None
) -> None:
    """Poll the server's heartbeat until it answers.

    A server that cannot be reached is waited for (it may be starting); one that answers
    as no Chroma server would is refused at once.

    Args:
        url: `http(s)://host:port` of the server.
        timeout: Seconds to wait before giving up.
        headers: HTTP headers (e.g. an auth token) sent with the heartbeat.

    Raises:
        StorageError: the server did not answer within `timeout`, or answered wrongly.
    """
    target = ChromaURL.parse(url).url
    deadline = time.monotonic() + timeout
    waiting = False
    each = min(2.0, max(timeout, 0.1))
    while (down := _heartbeat(target, headers or {}, timeout=each)) is not None:
        if not down.wait:
            raise StorageError(f"no Chroma server at {target}: {down.why}; check the URL")
        if not waiting and timeout > 1.0:  # said once: the command line would sit silent
            logger.warning(
                "the Chroma server at %s does not answer yet (%s); waiting up to %g s",
                *(target, down.why, timeout),
            )
            waiting = True
        if time.monotonic() >= deadline:
            raise StorageError(
                f"the Chroma server at {target} did not answer {HEARTBEAT_PATH} within "
                f"{timeout:g} s ({down.why}); start it (chroma run --host 127.0.0.1 --port "
                "PORT --path DIR) or check the URL"
            )
        time.sleep(_POLL_S)


def connect_chroma(
    url: str,
    *,
    timeout: float = 30.0,
    headers: Mapping[str, str] | None = None,
    tenant: str | None = None,
    database: str | None = None,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
) -> ClientAPI:
    """A `chromadb.HttpClient` for `url`, built once the heartbeat answers.

    Telemetry is off. `tenant` and `database` default to Chroma's own defaults. Each
    request waits at most `request_timeout` seconds (None: forever), and one the server
    cannot answer raises `StorageError` naming it (`_guard_requests`).

    Raises:
        StorageError: the server did not answer within `timeout`.
        InvalidOptionError: the server has no such tenant or database.
    """
    import chromadb
    from chromadb.config import Settings
    from chromadb.errors import NotFoundError

    where = ChromaURL.parse(url)
    wait_for_chroma(where.url, timeout=timeout, headers=headers)
    extra: dict[str, Any] = {}
    if tenant is not None:
        extra["tenant"] = tenant
    if database is not None:
        extra["database"] = database
    try:
        client = chromadb.HttpClient(
            host=where.host,
            port=where.port,
            ssl=where.ssl,
            headers=dict(headers or {}),
            settings=Settings(anonymized_telemetry=False),
            **extra,
        )
    except NotFoundError as exc:  # the client checks the tenant and database it is given
        raise InvalidOptionError(
            f"the Chroma server at {where.url} has no tenant {tenant or 'default_tenant'!r} "
            f"with database {database or 'default_database'!r} ({exc}); create them on the "
            "server (chromadb.AdminClient) or give ones it has"
        ) from exc
    _guard_requests(client, where.url, request_timeout)
    return client


def _guard_requests(client: ClientAPI, url: str, seconds: float | None) -> None:
    """Give the client's HTTP requests a deadline, and name the server when one fails.

    chromadb's `HttpClient` (1.5) sends every request through one `httpx.Client` (the
    `_session` of its `_server`), with `timeout=None`: a server that accepts and never
    answers (stopped, overloaded) held the call, and a recall, forever; one that is down
    raised httpx's bare `ConnectError` from every call. Here every request waits at most
    `seconds` (None: forever), and a transport failure (refused, reset, timed out) is a
    `StorageError` naming the server, whichever call made it (the async twins run the
    same client in an executor). If a later chromadb moves the session, this says so.
    """
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):
        logger.warning(
            "cannot guard the Chroma client's requests (this chromadb keeps its HTTP "
            "session elsewhere): a server that stops answering holds calls, and one that "
            "is down raises httpx's errors"
        )
        return
    if seconds is not None:
        session.timeout = httpx.Timeout(seconds)
    send = session.request

    def request(method: str, target: Any, **kwargs: Any) -> httpx.Response:
        try:
            return send(method, target, **kwargs)
        except httpx.TransportError as exc:
            raise StorageError(
                f"the Chroma server at {url} could not be reached ({method.upper()} "
                f"{urlsplit(str(target)).path}: {exc!r}); check that it runs (chroma run "
                "--host HOST --port PORT --path DIR) and is reachable"
            ) from exc

    session.request = request  # type: ignore[method-assign,assignment]


def _close_client(client: ClientAPI, held: HttpResources | None) -> None:
    """Close an index's own client, and what chromadb's close leaves (`http_close`)."""
    try:
        if hasattr(client, "close"):  # chromadb >= 1.1
            client.close()
    finally:
        if held is not None:
            held.release()


class ChromaServerVectorIndex(ChromaVectorIndex):
    """The Chroma vector index on a Chroma server.

    Setup (the server: `chroma run --path ./chroma-data --host 127.0.0.1 --port 8000`):

    ```python
    vectors = ChromaServerVectorIndex("http://127.0.0.1:8000")
    memory = SemanticRecall(storage=storage, vector_store=vectors, embeddings=embedder)
    ```

    Sync use:

    ```python
    memory.index(turn, thread_id="t1", resource_id="alice")
    ```

    Async use (the HTTP client runs in an executor):

    ```python
    await memory.arecall(messages, thread_id="t1", resource_id="alice")
    ```

    Everything else is `ChromaVectorIndex`: cosine collections named after the
    index, the embedding model and dimension recorded on them, scoped queries, and
    `export` / `count` (paged `get` calls over HTTP, within the server's batch limit).
    `compact` (`SemanticRecall.purge`) rebuilds the index's collections over HTTP; the
    server's own files (folders of dropped collections, its log, free pages) are its
    operator's to compact (see `docs/data-handling.md`).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        tenant: str | None = None,
        database: str | None = None,
        hnsw: Mapping[str, Any] | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        """Wait for the server's heartbeat, then connect.

        Args:
            url: `http(s)://host:port` of the server.
            timeout: Seconds to wait for the heartbeat.
            headers: HTTP headers for every request (e.g. `{"x-chroma-token": ...}`).
            tenant: Chroma tenant (Chroma's default when None).
            database: Chroma database (Chroma's default when None).
            hnsw: HNSW settings for new collections (see `ChromaVectorIndex`).
            request_timeout: Seconds each request may take; a call that waits longer
                raises `StorageError` (recall goes on without memory). None: no bound.

        Raises:
            StorageError: the server did not answer within `timeout`.
            InvalidOptionError: a URL with more than a host and port, or a tenant or
                database the server does not have.
        """
        where = ChromaURL.parse(url)
        tenant = _one("tenant", tenant, where.tenant)
        database = _one("database", database, where.database)
        if where.request_timeout is not None:  # the URL's, unless the argument says another
            if request_timeout not in (DEFAULT_REQUEST_TIMEOUT, where.request_timeout):
                raise InvalidOptionError(
                    f"request_timeout={request_timeout} and the URL's ?request_timeout="
                    f"{where.request_timeout} differ: give one"
                )
            request_timeout = where.request_timeout
        self.url = where.url
        self._headers = dict(headers or {})
        client = connect_chroma(
            self.url,
            timeout=timeout,
            headers=self._headers,
            tenant=tenant,
            database=database,
            request_timeout=request_timeout,
        )
        super().__init__(client, hnsw=hnsw)
        held = HttpResources.of(client) if self._workarounds.enabled else None
        # Closed with the index, or once it is collected unclosed (an engine per request):
        # chromadb's process-wide cache keeps each HTTP client's `System` until then.
        self._close_own = own(self, partial(_close_client, client, held))
        logger.debug("connected to the Chroma server at %s", self.url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def heartbeat(self, timeout: float = 2.0) -> bool:
        """Whether the server answers right now.

        Args:
            timeout: Seconds to wait for the answer.
        """
        return _heartbeat(self.url, self._headers, timeout=timeout) is None

    async def aheartbeat(self, timeout: float = 2.0) -> bool:  # noqa: ASYNC109 - HTTP's timeout
        """Async twin of `heartbeat`."""
        return await run_in_executor(None, self.heartbeat, timeout)
