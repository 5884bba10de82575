"""Generated stateless clients: whatever history a client sends back, nothing it holds is lost.

A server without a checkpointer gets the conversation from the client on every request,
and `add_messages` gives each message a new id each time (`turn_index` matches the
history by its words). Clients differ: some send back the replies whole, some trimmed,
some not at all; some edit an earlier message and resubmit; some hold a message whose
request failed and send it again with the next one; some lose an answer (a timeout) and
send the same request again. Every message the client holds must be stored, in its
order; without edits, each exactly once (each attempt of a request is a turn).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fakes import FactsMemory, FakeChatModel
from tests.unit.test_graph_flows import _stateless_app, config

WORDS = st.sampled_from(["garden?", "piano?", "tennis?", "golf?"])  # repeats are common
ACTIONS = st.one_of(
    st.tuples(st.just("say"), WORDS, st.sampled_from(["whole", "trimmed", "dropped"])),
    st.tuples(st.just("unsent"), WORDS, st.just(0)),  # its request failed: held, sent later
    st.tuples(st.just("edit"), WORDS, st.integers(0, 5)),  # resubmit from an earlier message
    st.tuples(st.just("lost"), WORDS, st.integers(1, 2)),  # answered unseen n times: sent again
)

EDIT_AFTER_FIVE = [*[("say", "garden?", "whole")] * 5, ("edit", "garden?", 0)]


def _words(text: str) -> str:
    return " ".join(text.split())


def _in_order(wanted: list[str], stored: list[str]) -> bool:
    rest = iter(stored)
    return all(any(word == have for have in rest) for word in wanted)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ACTIONS, min_size=1, max_size=9), st.sampled_from(["graph", "agent"]))
@example(  # an edit, then a turn whose request failed: its words must not match older ones
    [*EDIT_AFTER_FIVE, ("unsent", "piano?", 0), ("say", "garden?", "whole")],
    "graph",
)
@example(  # a request sent again: its history was stored once more, at every later turn
    [("say", "garden?", "whole"), ("lost", "piano?", 2), ("say", "tennis?", "whole")],
    "agent",
)
def test_generated_stateless_clients_lose_nothing(actions: list[Any], surface: str) -> None:
    memory = FactsMemory()
    model = FakeChatModel(reply=lambda messages: f"ok: {messages[-1].text}\n")
    app = _stateless_app(memory, surface, model)
    history: list[dict[str, str]] = []
    replies = "whole"
    sent = unsent = 0
    edited = False
    prompt = [{"role": "system", "content": "Be brief."}] if surface == "agent" else []
    for n, (kind, chosen, how) in enumerate(actions):
        # A lost request has words of its own: the same words said elsewhere in the
        # thread make a retry ambiguous (docs/surfaces.md).
        word = f"{chosen} ({n})" if kind == "lost" else chosen
        if kind == "unsent":
            history.append({"role": "user", "content": word})
            unsent += 1
            continue
        if kind == "lost":  # answered and stored, never seen by the client: sent again
            for _ in range(how):
                state = {"messages": [*prompt, *history, {"role": "user", "content": word}]}
                app.invoke(state, config("client"))
                sent += 1
        elif kind == "edit":
            users = [i for i, m in enumerate(history) if m["role"] == "user"]
            history = history[: users[how % len(users)]] if users else history
            edited = True
        else:
            replies = how
        history.append({"role": "user", "content": word})
        answer = app.invoke({"messages": [*prompt, *history]}, config("client"))["messages"][-1]
        sent += 1
        if replies != "dropped":
            text = answer.text if replies == "whole" else answer.text.strip()
            history.append({"role": "assistant", "content": text})
        stored = [_words(m.text) for m in memory.stored("client")]
        assert _in_order([_words(m["content"]) for m in history], stored), (actions, stored)
        if not edited:  # each message once: every turn's two, and the held ones
            assert len(stored) == 2 * sent + unsent, (actions, stored)
