"""The example LangGraph server (``examples/langgraph_server``) run by ``langgraph dev``.

A real server (``langgraph-cli[inmem]``, the in-memory runtime) in its own process group
on a free loopback port, with the example's custom authentication (two users with bearer
tokens) and its embedded memory under a temporary ``SEMANTIC_RECALL_PATH``. The tests
drive it over HTTP with ``langgraph_sdk``, as a deployment's clients would, and check that
the resource is the signed-in user on both graphs (our nodes, and ``create_agent`` with
the middleware):

- a fact told in one thread is recalled in another thread of the same user, in what the
  model was given (the ``tasks`` stream shows the recall step's result) and in its answer;
- another user never gets it, whatever the graph, the thread or the tool;
- a run that asks for another user's resource (``config`` or ``context``) fails and
  leaks nothing; a client cannot pose as another user through the reserved config key;
- the memory survives a restart of the server.

No network but loopback: the CLI's analytics and the server's version check are off,
tracing is off, and any other outbound HTTP goes to a dead local proxy. The example is
copied to a temporary folder, so the server's own files stay out of the checkout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import Config

from tests.integration.conftest import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_server"
GRAPHS = ("recall_graph", "recall_agent")
"""The example's two graphs: ``create_recall_graph`` and ``create_agent`` + middleware."""
RECALL_STEPS = {"recall", "SemanticRecallMiddleware.before_agent"}
"""The step that recalls, in each graph (its result is what the model is given)."""
TOKENS = {"alice": "alice-token", "bob": "bob-token"}
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
RUN_TIMEOUT_S = 60.0

QUIET_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # langgraph_cli/analytics.py: no usage report
    "LANGGRAPH_NO_VERSION_CHECK": "1",  # langgraph_api/cli.py: no PyPI version check
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_OTEL_ENABLED": "false",
    "ANONYMIZED_TELEMETRY": "False",  # Chroma (the engine turns it off too)
    "HF_HUB_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    # Whatever else would call out goes to a closed local port and fails at once.
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}
DROPPED_ENV = (
    "OPENAI_API_KEY",  # the example would use ChatOpenAI: the offline model answers here
    "LANGSMITH_API_KEY",
    "LANGCHAIN_API_KEY",
    "LANGGRAPH_CLOUD_LICENSE_KEY",  # langgraph_api/metadata.py: no metadata loop without
    "LANGSMITH_CONTROL_PLANE_API_KEY",
    "EXAMPLE_TOKENS",
    "no_proxy",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


# --- the server -------------------------------------------------------------------------


def _langgraph_command() -> str:
    beside = Path(sys.executable).parent / "langgraph"
    found = str(beside) if beside.exists() else shutil.which("langgraph")
    if found is None:
        raise RuntimeError('langgraph-cli is not installed: pip install "langgraph-cli[inmem]"')
    return found


_MOVED = re.compile(r"Port \d+ is already in use, using port (?P<port>\d+) instead")


def _server_ok(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/ok", timeout=2) as answer:
        return bool(answer.status == 200 and json.loads(answer.read()).get("ok"))


class DevServer:
    """``langgraph dev`` serving a copy of the example, in its own process group."""

    def __init__(self, root: Path) -> None:
        self.workdir = root / "server"
        self.memory = root / "memory"
        self.log = root / "server.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        shutil.copytree(
            EXAMPLE,
            self.workdir,
            ignore=shutil.ignore_patterns(".memory", ".langgraph_api", "__pycache__", "*.md"),
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DevServer:
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        env.update(QUIET_ENV, SEMANTIC_RECALL_PATH=str(self.memory), PYTHONDONTWRITEBYTECODE="1")
        self.port = free_port()
        argv = [_langgraph_command(), "dev", "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["--no-browser", "--no-reload", "--server-log-level", "WARNING"]
        with self.log.open("ab") as log:
            log.write(f"\n--- {' '.join(argv)}\n".encode())
            log.flush()
            since = log.tell()
            self.process = subprocess.Popen(
                argv,
                cwd=self.workdir,  # `langgraph dev` reads paths against its working folder
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited with {process.returncode}")
            # A port taken since free_port(): `langgraph dev` picks another and says which.
            with self.log.open("rb") as log:
                log.seek(since)
                moved = _MOVED.search(log.read().decode(errors="replace"))
            if moved:
                self.port = int(moved["port"])
            return _server_ok(self.url)

        try:
            wait_until(ready, timeout=START_TIMEOUT_S, what=f"langgraph dev at {self.url}")
        except (RuntimeError, TimeoutError) as error:
            self.stop()
            raise RuntimeError(f"{error}\n{self.log_tail()}") from error
        return self

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL if it is still there after a bound."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):  # no child left behind either
            os.killpg(process.pid, signal.SIGKILL)

    def log_tail(self, chars: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- server log (tail) ---\n{text[-chars:]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """The example server for this module, its memory in a temporary folder."""
    dev = DevServer(tmp_path_factory.mktemp("langgraph-server"))
    try:
        yield dev.start()
    finally:
        dev.stop()


# --- a client ---------------------------------------------------------------------------


@dataclass
class Run:
    """What one streamed run showed: every event, the recall step's result, the answer."""

    events: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Everything the stream carried, as JSON text (to look for a leak anywhere)."""
        return json.dumps([data for _, data in self.events], default=str)

    @property
    def errors(self) -> list[Any]:
        return [data for event, data in self.events if event == "error"]

    @property
    def recalled(self) -> str:
        """The recalled messages the model was given (the recall step's task result)."""
        found = [
            message["content"]
            for event, data in self.events
            if event == "tasks" and data.get("name") in RECALL_STEPS and "result" in data
            for message in ((data["result"] or {}).get("recalled_memory") or {}).get("messages", [])
        ]
        return "\n".join(found)

    @property
    def recall_ran(self) -> bool:
        return any(
            event == "tasks" and data.get("name") in RECALL_STEPS and "result" in data
            for event, data in self.events
        )

    @property
    def answer(self) -> str:
        values = [data for event, data in self.events if event == "values"]
        messages = values[-1]["messages"] if values else []
        return str(messages[-1]["content"]) if messages else ""


@contextlib.asynccontextmanager
async def client_of(server: DevServer, user: str) -> AsyncIterator[LangGraphClient]:
    headers = {"Authorization": f"Bearer {TOKENS[user]}"}
    async with get_client(url=server.url, headers=headers, timeout=RUN_TIMEOUT_S) as client:
        yield client


def user_input(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def new_thread(client: LangGraphClient) -> str:
    thread = await client.threads.create()
    return str(thread["thread_id"])


async def turn(
    client: LangGraphClient,
    thread_id: str,
    graph: str,
    text: str,
    *,
    config: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
) -> Run:
    """One user turn, streamed with the ``tasks`` mode (each step's input and result)."""
    run = Run()

    async def consume() -> None:
        async for part in client.runs.stream(
            thread_id,
            graph,
            input=user_input(text),
            stream_mode=["tasks", "values"],
            config=cast("Config", dict(config)) if config is not None else None,
            context=dict(context) if context is not None else None,
        ):
            run.events.append((part.event, part.data))

    await asyncio.wait_for(consume(), timeout=RUN_TIMEOUT_S)
    return run


TOPICS = [
    ("my locker code at the climbing gym", "What is my locker code at the climbing gym?"),
    ("the wifi password of my cabin", "What is the wifi password of my cabin?"),
    ("my library card", "Which library card do I have?"),
    ("the alarm code of my garage", "What is the alarm code of my garage?"),
    ("my frequent flyer account", "What is my frequent flyer account?"),
    ("the serial of my telescope", "What is the serial of my telescope?"),
    ("my chess club membership", "What is my chess club membership?"),
    ("the gate code of my parents' farm", "What is the gate code of my parents' farm?"),
    ("my dentist's patient reference", "What is my dentist's patient reference?"),
    ("the license plate of my van", "What is the license plate of my van?"),
    ("my pottery class locker", "Which pottery class locker is mine?"),
    ("the booking reference of my ferry", "What is the booking reference of my ferry?"),
]
_topics = itertools.count()


def unique_fact() -> tuple[str, str, str]:
    """A statement, the question it answers, and the secret only the statement holds.

    Each call takes a topic of its own: the users' memories outlive a test (one server
    per module), and the offline model quotes the remembered line closest to a question.
    """
    subject, question = TOPICS[next(_topics) % len(TOPICS)]
    secret = f"{uuid.uuid4().int % 10**8:08d}"
    return f"{subject[0].upper()}{subject[1:]} is {secret}.", question, secret


# --- the tests --------------------------------------------------------------------------


@pytest.mark.parametrize("graph", GRAPHS)
async def test_cross_thread_recall_is_the_signed_in_users_own(
    server: DevServer, graph: str
) -> None:
    told, question, secret = unique_fact()
    bob_told, bob_question, bob_secret = unique_fact()
    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        first = await turn(alice, await new_thread(alice), graph, told)
        assert not first.errors, f"{first.errors}\n{server.log_tail()}"
        await turn(bob, await new_thread(bob), graph, bob_told)

        # Alice, in another thread: the fact is what the model is given, and answers.
        asked = await turn(alice, await new_thread(alice), graph, question)
        assert not asked.errors, f"{asked.errors}\n{server.log_tail()}"
        assert asked.recall_ran, asked.events
        assert secret in asked.recalled, asked.recalled
        assert secret in asked.answer, asked.answer
        assert bob_secret not in asked.text

        # Bob asks the same in two of his threads: nothing of Alice's, anywhere.
        for _ in range(2):
            probe = await turn(bob, await new_thread(bob), graph, question)
            assert not probe.errors, f"{probe.errors}\n{server.log_tail()}"
            assert probe.recall_ran, probe.events
            assert secret not in probe.text, probe.text
            assert told not in probe.text

        # Bob's own fact comes back to him across threads, and never to Alice.
        own = await turn(bob, await new_thread(bob), graph, bob_question)
        assert bob_secret in own.recalled, own.recalled
        assert bob_secret in own.answer, own.answer
        assert secret not in own.text
        other = await turn(alice, await new_thread(alice), graph, bob_question)
        assert bob_secret not in other.text, other.text


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("channel", ["config", "context"])
async def test_a_spoofed_resource_is_refused_and_leaks_nothing(
    server: DevServer, graph: str, channel: str
) -> None:
    told, question, secret = unique_fact()
    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        await turn(alice, await new_thread(alice), graph, told)
        check = await turn(alice, await new_thread(alice), graph, question)
        assert secret in check.answer, f"{check.answer}\n{server.log_tail()}"

        thread = await new_thread(bob)
        spoof = {"resource_id": "alice"}
        if channel == "config":
            run = await turn(bob, thread, graph, question, config={"configurable": spoof})
        else:
            run = await turn(bob, thread, graph, question, context=spoof)
        assert secret not in run.text, f"Alice's fact reached Bob: {run.text}"
        assert told not in run.text
        assert not run.recalled
        assert [e.get("error") for e in run.errors] == ["IdentityMismatchError"], run.events
        state = await bob.threads.get_state(thread)
        assert secret not in json.dumps(state, default=str)

        # The same, waited for instead of streamed: the run fails.
        with pytest.raises(Exception, match="IdentityMismatchError"):
            await asyncio.wait_for(
                bob.runs.wait(
                    await new_thread(bob),
                    graph,
                    input=user_input(question),
                    config={"configurable": spoof} if channel == "config" else None,
                    context=spoof if channel == "context" else None,
                    raise_error=True,
                ),
                timeout=RUN_TIMEOUT_S,
            )


async def test_the_authenticated_user_key_cannot_be_set_by_the_client(server: DevServer) -> None:
    """The server replaces a client's ``langgraph_auth_user_id``: Bob stays Bob."""
    told, question, secret = unique_fact()
    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        await turn(alice, await new_thread(alice), "recall_graph", told)
        forged = {"configurable": {"langgraph_auth_user_id": "alice"}}
        run = await turn(bob, await new_thread(bob), "recall_graph", question, config=forged)
        assert not run.errors, run.events
        assert run.recall_ran
        assert secret not in run.text, run.text


async def test_the_agents_memory_search_tool_is_scoped_to_the_signed_in_user(
    server: DevServer,
) -> None:
    told, question, secret = unique_fact()
    ask = f"Please search your memory: {question[0].lower()}{question[1:]}"
    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        await turn(alice, await new_thread(alice), "recall_agent", told)
        found = await turn(alice, await new_thread(alice), "recall_agent", ask)
        assert '"search_memory"' in found.text, found.text  # the tool was called
        assert secret in found.answer, found.answer
        probe = await turn(bob, await new_thread(bob), "recall_agent", ask)
        assert not probe.errors, probe.events
        assert '"search_memory"' in probe.text, probe.text
        assert secret not in probe.text, probe.text


async def test_threads_and_tokens_are_checked_by_the_auth_handler(server: DevServer) -> None:
    from langgraph_sdk.errors import AuthenticationError, NotFoundError

    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        thread = await new_thread(alice)
        with pytest.raises(NotFoundError):
            await bob.threads.get(thread)
        found = await bob.threads.search(limit=100)
        assert thread not in {t["thread_id"] for t in found}
    async with get_client(url=server.url, headers={"Authorization": "Bearer nope"}) as nobody:
        with pytest.raises(AuthenticationError):
            await nobody.threads.create()


async def test_a_user_cannot_hand_a_thread_to_another_owner(server: DevServer) -> None:
    """``threads.update`` may change metadata, never the owner the auth handler stamped."""
    from langgraph_sdk.errors import NotFoundError, PermissionDeniedError

    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        thread = await new_thread(alice)
        with pytest.raises(PermissionDeniedError):
            await alice.threads.update(thread, metadata={"owner": "bob"})
        with pytest.raises(NotFoundError):  # bob never owned it
            await bob.threads.update(thread, metadata={"owner": "bob"})
        await alice.threads.update(thread, metadata={"topic": "trips", "owner": "alice"})
        kept = await alice.threads.get(thread)
        assert kept["metadata"]["owner"] == "alice"
        assert kept["metadata"]["topic"] == "trips"
        with pytest.raises(NotFoundError):
            await bob.threads.get(thread)


async def test_memory_survives_a_server_restart(server: DevServer) -> None:
    facts = {graph: unique_fact() for graph in GRAPHS}
    async with client_of(server, "alice") as alice:
        for graph, (told, _, _) in facts.items():
            await turn(alice, await new_thread(alice), graph, told)

    server.stop()
    server.start()  # the same memory path, a new process

    async with client_of(server, "alice") as alice, client_of(server, "bob") as bob:
        for graph, (_, question, secret) in facts.items():
            # Asked through the other graph: one memory per user, whatever the graph.
            for asking in GRAPHS:
                run = await turn(alice, await new_thread(alice), asking, question)
                assert secret in run.recalled, f"{graph} -> {asking}: {run.recalled}"
                assert secret in run.answer, run.answer
            probe = await turn(bob, await new_thread(bob), graph, question)
            assert secret not in probe.text, probe.text
