"""A vector snapshot's own rules: the exact scan, the log replay and the file (no Chroma).

Chroma's side (its log, its loads, the background builds) is in
tests/integration/test_chroma_snapshots.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_semantic_recall.vectors.chroma_log import (
    ADD,
    DELETE,
    UPDATE,
    UPSERT,
    LogRecord,
    Stamp,
)
from langchain_semantic_recall.vectors.chroma_snapshot import FORMAT, Snapshot, message_id_of

DIMENSION = 4


def snapshot(rows: dict[str, list[float]], *, seq: int = 10) -> Snapshot:
    ids = list(rows)
    return Snapshot.of(
        Stamp("c1", seq, len(ids)),
        ids,
        [message_id_of(i, {}) for i in ids],
        np.array(list(rows.values())),
    )


def record(
    seq: int, operation: int, vector_id: str, vector: list[float] | None = None, **metadata: str
) -> LogRecord:
    blob = None if vector is None else np.asarray(vector, dtype="<f4").tobytes()
    return LogRecord(
        seq, operation, vector_id, blob, "FLOAT32", json.dumps(metadata) if metadata else None
    )


def held(s: Snapshot) -> dict[str, tuple[str, list[float]]]:
    s = s.flat()
    return {
        v: (m, [round(float(x), 5) for x in s.vectors[i]])
        for i, (v, m) in enumerate(zip(s.vector_ids, s.message_ids, strict=True))
    }


BASE = {"a": [1.0, 0, 0, 0], "b": [0, 2.0, 0, 0], "c": [0, 0, 3.0, 0]}


def test_nearest_is_the_exact_cosine_order_with_message_ids() -> None:
    s = snapshot({**BASE, "m#1": [1.0, 1.0, 0, 0]})
    found = s.nearest([1.0, 0.1, 0, 0], k=3)
    assert [m for m, _ in found] == ["a", "m#1", "b"]  # '#' without metadata: its own id
    assert found[0][1] == pytest.approx(1 / np.sqrt(1.01))
    assert all(0.0 <= score <= 1.0 for _, score in found)
    assert len(s.nearest([1.0, 0, 0, 0], k=50)) == 4
    assert s.nearest([-1.0, 0, 0, 0], k=1)[0][1] >= 0.0  # opposite directions clip to 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(
            st.floats(-1, 1, allow_nan=False, width=32), min_size=DIMENSION, max_size=DIMENSION
        ),
        min_size=1,
        max_size=30,
    ),
    st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIMENSION, max_size=DIMENSION),
    st.integers(1, 40),
)
def test_nearest_agrees_with_a_plain_scan(
    rows: list[list[float]], query: list[float], k: int
) -> None:
    s = snapshot({f"v{i}": row for i, row in enumerate(rows)})
    matrix = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    q = np.asarray(query, dtype=np.float64)
    qn = np.linalg.norm(q) or 1.0
    cos = np.where(norms > 0, matrix @ q / np.where(norms > 0, norms, 1.0) / qn, 0.0)
    expected = sorted(np.clip(cos, 0, 1), reverse=True)[:k]
    found = [score for _, score in s.nearest(query, k)]
    assert found == pytest.approx(expected, abs=1e-5)


def test_replay_follows_chromas_rules() -> None:
    s = snapshot(BASE)
    tail = [
        record(11, ADD, "a", [0, 0, 0, 9.0]),  # an add of an id held: ignored
        record(12, UPDATE, "zz", [0, 0, 0, 1.0]),  # an update of an id not held: ignored
        record(13, UPSERT, "b", [0, 0, 0, 5.0]),  # replaced
        record(14, DELETE, "c"),
        record(15, UPSERT, "m#2", [1.0, 0, 0, 0], message_id="m"),  # a chunk: its message
        record(16, ADD, "d", [0, 1.0, 0, 0]),
        record(17, UPDATE, "d", None, role="user"),  # metadata only: vector and message kept
    ]
    replayed = s.replayed(Stamp("c1", 17, 4), tail)
    assert replayed is not None
    assert replayed.seq == 17
    assert held(replayed) == {
        "a": ("a", [1.0, 0, 0, 0]),
        "b": ("b", [0, 0, 0, 1.0]),
        "m#2": ("m", [1.0, 0, 0, 0]),
        "d": ("d", [0, 1.0, 0, 0]),
    }
    assert held(s)["c"] == ("c", [0, 0, 1.0, 0])  # the snapshot itself is unchanged


@pytest.mark.parametrize(
    "bad",
    [
        LogRecord(11, UPSERT, "x", np.zeros(3, "<f4").tobytes(), "FLOAT32", None),  # wrong size
        LogRecord(11, UPSERT, "x", np.zeros(4, "<f8").tobytes()[:16], "INT32", None),
        LogRecord(11, UPSERT, "x", None, None, None),  # a new record without a vector
        LogRecord(11, UPSERT, "x#1", np.zeros(4, "<f4").tobytes(), "FLOAT32", "{not json"),
    ],
)
def test_replay_refuses_what_it_cannot_read(bad: LogRecord) -> None:
    assert snapshot(BASE).replayed(Stamp("c1", 11, 4), [bad]) is None


def test_replay_refuses_a_count_chroma_does_not_hold() -> None:
    tail = [record(11, UPSERT, "x", [1.0, 0, 0, 0])]
    assert snapshot(BASE).replayed(Stamp("c1", 11, 4), tail) is not None
    assert snapshot(BASE).replayed(Stamp("c1", 11, 5), tail) is None  # a row it never saw


def test_the_file_round_trips_and_a_damaged_one_is_not_read(tmp_path: Path) -> None:
    s = snapshot({**BASE, "ünï#1": [0, 0, 0, 1.0]}, seq=42)
    s.save(tmp_path, "coll")
    assert Snapshot.exists(tmp_path, "coll")
    loaded = Snapshot.load(tmp_path, "coll")
    assert loaded is not None
    assert (loaded.collection_id, loaded.seq) == ("c1", 42)
    assert held(loaded) == held(s)
    assert [p.name for p in tmp_path.iterdir()] == ["coll.vectors"]  # no temporary file left
    (tmp_path / "coll.vectors").write_bytes(b"not a snapshot")
    assert Snapshot.load(tmp_path, "coll") is None
    Snapshot.delete(tmp_path, "coll")
    Snapshot.delete(tmp_path, "coll")  # no error when gone
    assert Snapshot.load(tmp_path, "coll") is None
    assert not Snapshot.exists(tmp_path, "coll")


def test_an_empty_snapshot_round_trips(tmp_path: Path) -> None:
    empty = Snapshot.of(Stamp("c1", 3, 0), [], [], np.zeros((0, DIMENSION)))
    empty.save(tmp_path, "e")
    loaded = Snapshot.load(tmp_path, "e")
    assert loaded is not None
    assert len(loaded) == 0
    assert loaded.nearest([1.0, 0, 0, 0], 5) == []


def test_a_file_renamed_into_place_while_loading_is_not_mixed_with_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's rename between the header's read and the arrays' maps is not seen.

    Mapping the path again would map the new file's bytes at the old file's offsets:
    vector bytes read as ids (a UnicodeDecodeError once seen in CI).
    """
    import langchain_semantic_recall.vectors.chroma_snapshot as module

    old = snapshot(BASE)
    old.save(tmp_path, "coll")
    newer = snapshot({f"message-{i:04d}-{'x' * 40}": [1.0, i, 0, 0] for i in range(50)}, seq=11)
    real_loads = json.loads

    def loads_then_rename(text: bytes) -> object:
        newer.save(tmp_path, "coll")  # lands after the header was read
        return real_loads(text)

    monkeypatch.setattr(module.json, "loads", loads_then_rename)
    loaded = Snapshot.load(tmp_path, "coll")
    monkeypatch.undo()
    assert loaded is not None
    assert held(loaded) == held(old)
    assert held(Snapshot.load(tmp_path, "coll") or old) == held(newer)


def _with_header(folder: Path, name: str, header: bytes) -> None:
    """A file with a good frame (magic, aligned space) around `header`."""
    magic = b"SRSNAP1\n"
    body = magic + b"\0" * 64 + header + len(header).to_bytes(8, "little") + magic
    (folder / f"{name}.vectors").write_bytes(body)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_ARRAY = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from(["<f4", "|u1", "<i8", "O", "<U3", "bad"]),
    st.lists(st.integers(-3, 5), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        _JSON,
        st.fixed_dictionaries(
            {
                "format": st.just(FORMAT),
                "collection": _JSON,
                "seq": _JSON,
                "arrays": st.lists(_ARRAY, min_size=4, max_size=6),
            }
        ),
    )
)
def test_a_file_with_any_header_is_read_or_refused_never_raises(header: object) -> None:
    """A damaged or foreign file makes Chroma answer; it never fails the search."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        _with_header(Path(folder), "x", json.dumps(header).encode())
        loaded = Snapshot.load(Path(folder), "x")
        assert loaded is None or isinstance(loaded, Snapshot)


def test_deleting_a_snapshot_deletes_what_a_dead_writer_left(tmp_path: Path) -> None:
    """A process killed while writing leaves its temporary file: a forget deletes it too."""
    s = snapshot(BASE)
    s.save(tmp_path, "coll")
    left = tmp_path / "coll.4242-0123456789abcdef0123456789abcdef.tmp"
    left.write_bytes((tmp_path / "coll.vectors").read_bytes())  # what the writer had written
    other = tmp_path / "coll2.4242-0123456789abcdef0123456789abcdef.tmp"  # another collection's
    other.write_bytes(b"x")
    Snapshot.delete(tmp_path, "coll")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name]


def _model(
    rows: dict[str, tuple[str, list[float]]], tail: list[LogRecord]
) -> dict[str, tuple[str, list[float]]]:
    """Chroma's rules on a plain dict (vector id -> (message id, vector))."""
    rows = dict(rows)
    for r in tail:
        was = rows.get(r.vector_id)
        if r.operation == DELETE:
            rows.pop(r.vector_id, None)
            continue
        if (r.operation == ADD and was) or (r.operation == UPDATE and not was):
            continue
        meta = json.loads(r.metadata) if r.metadata else {}
        owner = was[0] if was and "message_id" not in meta else message_id_of(r.vector_id, meta)
        vector = list(np.frombuffer(r.vector, "<f4")) if r.vector else (was or ("", []))[1]
        rows[r.vector_id] = (owner, vector)
    return rows


_IDS = st.sampled_from(["a", "aa", "ba", "a#1", "b", "ab#2", "c", "new", "ne"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([ADD, UPDATE, UPSERT, DELETE]),
            _IDS,
            st.none() | st.lists(st.integers(-3, 3), min_size=4, max_size=4),
            st.none() | _IDS,
        ),
        max_size=12,
    ),
    st.booleans(),
)
def test_replay_from_the_file_agrees_with_chromas_rules(
    ops: list[tuple[int, str, list[int] | None, str | None]], from_file: bool
) -> None:
    """Ids inside other ids ('a' in 'ba'), deleted then added again, chunks, the file."""
    import tempfile

    base = {"a": [1.0, 0, 0, 0], "ba": [0, 1.0, 0, 0], "ab#2": [0, 0, 1.0, 0], "c": [1.0, 1, 1, 1]}
    s = Snapshot.of(
        Stamp("c1", 10, 4), list(base), ["a", "ba", "ab", "c"], np.array(list(base.values()))
    )
    with tempfile.TemporaryDirectory() as folder:
        if from_file:
            s.save(Path(folder), "x")
            loaded = Snapshot.load(Path(folder), "x")
            assert loaded is not None
            s = loaded
        tail = [
            record(
                11 + n,
                op,
                vid,
                None if v is None else [float(x) for x in v],
                **({} if m is None else {"message_id": m}),
            )
            for n, (op, vid, v, m) in enumerate(ops)
        ]
        expected = _model(held(s), tail)
        if any(not vector for _, vector in expected.values()):
            assert s.replayed(Stamp("c1", 11 + len(ops), len(expected)), tail) is None
            return
        replayed = s.replayed(Stamp("c1", 11 + len(ops), len(expected)), tail)
        if replayed is None:  # only a new record without a vector is refused here
            assert any(v is None and o != DELETE for o, _, v, _ in ops)
            return
        unit = {
            i: (m, [round(float(x), 5) for x in np.asarray(v) / (np.linalg.norm(v) or 1.0)])
            for i, (m, v) in expected.items()
        }
        assert held(replayed) == unit
        assert len(replayed) == len(unit)
        query = [1.0, 0.5, 0.25, 0.0]
        every = len(unit) + 1
        # Both sides sum float32 products in their own order: equal within float32, not
        # always to the fifth decimal (0.829515 rounds either way).
        found = sorted(replayed.nearest(query, every))
        flat = sorted(replayed.flat().nearest(query, every))
        assert [m for m, _ in found] == [m for m, _ in flat]
        assert np.allclose([x for _, x in found], [x for _, x in flat], rtol=0, atol=1e-6)
        replayed.save(Path(folder), "y")  # the rewrite writes the rows as they are now
        again = Snapshot.load(Path(folder), "y")
        assert again is not None
        assert held(again) == unit


def test_a_replay_keeps_the_files_rows_mapped_not_copied(tmp_path: Path) -> None:
    """A first search after writes pays for the writes, not for a copy of every row."""
    rows = {f"m{i}": [float(i % 3), 1.0, 0, 0] for i in range(50)}
    snapshot(rows).save(tmp_path, "coll")
    loaded = Snapshot.load(tmp_path, "coll")
    assert loaded is not None
    tail = [record(11, UPSERT, "new", [0, 0, 1.0, 0]), record(12, DELETE, "m3")]
    replayed = loaded.replayed(Stamp("c1", 12, 50), tail)
    assert replayed is not None
    assert np.shares_memory(replayed.vectors, loaded.vectors)
    assert [m for m, _ in replayed.nearest([0, 0, 1.0, 0], 1)] == ["new"]
    assert "m3" not in [m for m, _ in replayed.nearest([0, 1.0, 0, 0], 50)]


def test_a_tiny_vector_or_query_keeps_its_direction() -> None:
    """A float32 norm of ~1e-38 underflows to 0: the scan scaled first (hypothesis found it)."""
    s = snapshot({"tiny": [1.1754943508222875e-38, 0, 0, 0], "b": [0, 1.0, 0, 0]})
    for query, expected in (([1.0, 0, 0, 0], "tiny"), ([0, 1.1754943508222875e-38, 0, 0], "b")):
        [(found, score)] = s.nearest(query, 1)
        assert found == expected
        assert score == pytest.approx(1.0)


def test_positions_find_whole_ids_only_by_their_sorted_order() -> None:
    from langchain_semantic_recall.vectors.chroma_snapshot import PackedStrings, positions

    texts = [f"xa{i}" for i in range(100)] + ["a", "é#1", ""]
    packed = PackedStrings.of(texts)
    wanted = {"xa5", "xa50", "a", "é#1", "x", "nope", "xa", "xa500", ""}
    assert positions(packed, wanted) == {"xa5": 5, "xa50": 50, "a": 100, "é#1": 101, "": 102}
    assert [packed[int(i)] for i in packed.sorted_order()] == sorted(texts)
    assert positions(texts, {"xa7"}) == {"xa7": 7}  # not packed: a plain scan


_ID_CHARACTERS = st.characters(exclude_categories=("Cs",), exclude_characters="\0")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(_ID_CHARACTERS, max_size=6), unique=True))
def test_positions_in_a_file_are_the_ids_own(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str]
) -> None:
    from langchain_semantic_recall.vectors.chroma_snapshot import positions

    folder = tmp_path_factory.mktemp("ids")
    s = Snapshot.of(Stamp("c1", 1, len(ids)), ids, ids, np.ones((len(ids), DIMENSION)))
    s.save(folder, "c")
    loaded = Snapshot.load(folder, "c")
    assert loaded is not None
    probes = {*ids[:5], "absent", *(i + "x" for i in ids[:3])}
    assert positions(loaded.vector_ids, probes) == {i: ids.index(i) for i in probes if i in ids}


def test_a_save_never_creates_the_chroma_folder_itself(tmp_path: Path) -> None:
    """A purge swaps the Chroma folder by two renames: a build writing in between must not
    make a new Chroma folder that the second rename then cannot replace."""
    gone = tmp_path / "chroma"  # moved aside by the purge
    with pytest.raises(FileNotFoundError):
        snapshot(BASE).save(gone / "semantic-recall-snapshots", "coll")
    assert not gone.exists()
    gone.mkdir()
    assert snapshot(BASE).save(gone / "semantic-recall-snapshots", "coll")
