"""Waiting for a Chroma server: a wrong URL is said at once, a server starting is waited for.

A URL naming a web server, another protocol's port or https for http waited the whole
30 s before a bare "did not answer" (the backends audit of stop 48). Loopback servers
stand in for each; the real server is in test_chroma_server.py.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.vectors.chroma_server import HEARTBEAT_PATH, wait_for_chroma


def _handler(status: int, body: bytes) -> type[http.server.BaseHTTPRequestHandler]:
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == HEARTBEAT_PATH else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    return Answer


@pytest.fixture
def serve() -> Iterator[Callable[[int, bytes], str]]:
    """Start a loopback HTTP server answering the heartbeat with (status, body)."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(status: int, body: bytes) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(status, body))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


HEARTBEAT = json.dumps({"nanosecond heartbeat": 1}).encode()


@pytest.mark.parametrize(
    ("status", "body", "scheme", "said"),
    [
        (404, b"not found", "http", "answered 404"),
        (200, b"<html>a web page</html>", "http", "not JSON"),
        (200, b"[1, 2]", "http", "not Chroma's heartbeat"),
        (401, b"{}", "http", "refused the credentials"),
        (200, HEARTBEAT, "https", "TLS handshake failed"),
    ],
)
def test_a_server_that_answers_wrongly_is_refused_at_once(
    serve: Callable[[int, bytes], str], status: int, body: bytes, scheme: str, said: str
) -> None:
    where = serve(status, body)
    start = time.monotonic()
    with pytest.raises(StorageError, match=said):
        wait_for_chroma(f"{scheme}://{where}", timeout=20)
    assert time.monotonic() - start < 5  # not the 20 s a server starting is given


def test_a_port_of_another_protocol_is_refused_at_once() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def talk_nonsense() -> None:
            client, _ = listener.accept()
            with client:
                client.recv(1024)
                client.sendall(b"\x00\x01 not http\r\n\r\n")

        threading.Thread(target=talk_nonsense, daemon=True).start()
        port = listener.getsockname()[1]
        with pytest.raises(StorageError, match="does not speak HTTP"):
            wait_for_chroma(f"http://127.0.0.1:{port}", timeout=20)


def test_a_server_starting_is_waited_for_and_its_heartbeat_accepted(
    serve: Callable[[int, bytes], str], caplog: pytest.LogCaptureFixture
) -> None:
    wait_for_chroma(f"http://{serve(200, HEARTBEAT)}", timeout=1)  # up: no wait
    starting = serve(503, b"starting")  # a proxy before a server not up yet
    with pytest.raises(StorageError, match=r"within 1\.2 s \(it answered 503\)"):
        wait_for_chroma(f"http://{starting}", timeout=1.2)
    assert "does not answer yet (it answered 503)" in caplog.text
