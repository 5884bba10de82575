"""Store URLs and settings: a URL the package would misread is refused (no Chroma, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.settings import create_storage, create_vector_index, local_backends
from tests.fakes import FakeEmbeddings


@pytest.mark.parametrize("suffix", ["?mode=ro", "?cache=shared", "#backup"])
def test_a_sqlite_url_with_parameters_is_refused_not_read_as_a_file_name(
    tmp_path: Path, suffix: str
) -> None:
    file = tmp_path / "messages.sqlite3"
    with pytest.raises(InvalidOptionError, match="takes no parameters"):
        create_storage(f"sqlite:///{file}{suffix}")
    assert list(tmp_path.iterdir()) == []  # no file named "messages.sqlite3?mode=ro"


@pytest.mark.parametrize("url", ["memory://foo", "memory://?max_loaded=3", "memory:///tmp/x"])
def test_a_memory_url_with_a_path_or_parameters_is_refused(url: str) -> None:
    with pytest.raises(InvalidOptionError, match="write memory://"):
        create_storage(url)
    with pytest.raises(InvalidOptionError, match="write memory://"):
        create_vector_index(url)


def test_the_plain_memory_urls_still_work() -> None:
    storage = create_storage("MEMORY://")
    assert type(storage).__name__ == "InMemoryStorage"
    assert type(create_vector_index("memory://")).__name__ == "InMemoryVectorIndex"


@pytest.mark.parametrize("read_only", ["no", "false", 0])
def test_a_read_only_that_is_not_a_bool_is_an_option_error_before_anything_opens(
    tmp_path: Path, read_only: object
) -> None:
    # "no" is truthy: it was read as True, and a new store failed as "cannot be opened
    # read-only" (a StorageError) instead of naming the option.
    with pytest.raises(InvalidOptionError, match="read_only must be True, False or None"):
        local_backends(tmp_path / "store", FakeEmbeddings(), read_only=read_only)  # type: ignore[arg-type]
    assert not (tmp_path / "store").exists()


def test_engine_options_is_the_constructors_signature() -> None:
    import inspect

    from langchain_semantic_recall import SemanticRecall
    from langchain_semantic_recall.options import ENGINE_OPTIONS

    parameters = inspect.signature(SemanticRecall.__init__).parameters
    assert set(parameters) - {"self"} == ENGINE_OPTIONS


def test_a_misspelt_option_is_an_option_error_naming_the_right_one(tmp_path: Path) -> None:
    # It was a TypeError (not a SemanticRecallError); local() and from_url() raised it
    # only after opening the store, and RecallSettings kept it until from_url.
    from langchain_semantic_recall import InMemoryStorage, SemanticRecall
    from langchain_semantic_recall.settings import RecallSettings
    from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    with pytest.raises(InvalidOptionError, match="'topk': did you mean 'top_k'"):
        memory.with_options(topk=3)
    with pytest.raises(InvalidOptionError, match="'treshold': did you mean 'threshold'"):
        SemanticRecall.from_url(
            storage="memory://", vector="memory://", embeddings=FakeEmbeddings(), treshold=0.5
        )
    with pytest.raises(InvalidOptionError, match="'max_loaded'"):
        SemanticRecall.local(tmp_path / "store", embeddings=FakeEmbeddings(), max_loaded=3)
    assert not (tmp_path / "store").exists()  # refused before anything was opened
    with pytest.raises(InvalidOptionError, match="'scopes': did you mean 'scope'"):
        RecallSettings.from_env({}, scopes="thread")
    with pytest.raises(InvalidOptionError, match="storage_url must be a URL string"):
        RecallSettings(storage_url=Path("/tmp/x.sqlite3"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "query",
    [
        "pool_min_size=-1",
        "pool_max_size=0",
        "pool_min_size=5&pool_max_size=2",
        "pool_min_size=20",  # over the default max of 10
        "pool_min_size=2&pool_min_size=3",
        "pool_max_size=1.5",
    ],
)
def test_pool_sizes_that_cannot_make_a_pool_are_refused_before_connecting(query: str) -> None:
    # They reached the pool (a connection attempt first: no socket here), or the last of
    # two values won silently.
    with pytest.raises(InvalidOptionError, match="pool_m"):
        create_storage(f"postgresql://app@127.0.0.1:5432/memory?{query}")


@pytest.mark.parametrize(
    "environ",
    [
        {"SEMANTIC_RECALL_STORAGE_URL": "postgresql://app@db.internal/memory"},
        {"SEMANTIC_RECALL_VECTOR_URL": "http://chroma.internal:8000"},
        {"SEMANTIC_RECALL_STORAGE_URL": "memory://", "SEMANTIC_RECALL_VECTOR_URL": ""},
    ],
)
def test_from_env_refuses_one_url_without_the_other(environ: dict[str, str]) -> None:
    # The unset one fell back to the embedded default: each replica kept its own vectors
    # (or its own messages) beside a shared server, without a word.
    from langchain_semantic_recall.settings import RecallSettings

    with pytest.raises(InvalidOptionError, match="set both"):
        RecallSettings.from_env(environ)


def test_from_env_with_neither_or_both_set() -> None:
    from langchain_semantic_recall.settings import DEFAULT_STORAGE_URL, RecallSettings

    assert RecallSettings.from_env({}).storage_url == DEFAULT_STORAGE_URL
    both = {"SEMANTIC_RECALL_STORAGE_URL": "memory://", "SEMANTIC_RECALL_VECTOR_URL": "memory://"}
    assert RecallSettings.from_env(both).url_options() == {
        "storage": "memory://",
        "vector": "memory://",
    }


def test_the_docs_name_the_folder_from_env_defaults_to() -> None:
    """`RecallSettings.from_env()` without the variables is not the CLI's default store."""
    from langchain_semantic_recall.cli.common import DEFAULT_PATH
    from langchain_semantic_recall.settings import RecallSettings

    settings = RecallSettings.from_env({})
    folder = settings.storage_url.removeprefix("sqlite:///").rsplit("/", 1)[0]
    assert settings.vector_url == f"chroma:///{folder}/chroma"
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page in ("guide.md", "scale.md"):
        text = " ".join((docs / page).read_text(encoding="utf-8").split())
        assert f"under `./{folder}`" in text, page
    assert f"its own default is `{DEFAULT_PATH}`" in (docs / "scale.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", ["", None, 3])
def test_a_local_store_without_a_folder_is_an_option_error_not_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: object
) -> None:
    # "" was read as ".": `local(os.environ.get("MEMORY", ""))` filled the working folder.
    from langchain_semantic_recall import SemanticRecall

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidOptionError, match="the store's folder must be a path"):
        SemanticRecall.local(path, embeddings=FakeEmbeddings())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "conninfo"),
    [
        (
            "postgresql:///memory?host=/run/postgresql",
            "postgresql:///memory?host=%2Frun%2Fpostgresql",
        ),
        ("postgresql:///memory", "postgresql:///memory"),
        ("postgres://app@db.internal/memory", "postgresql://app@db.internal/memory"),
        (
            "postgresql://app@db/memory?pool_max_size=4&sslmode=require",
            "postgresql://app@db/memory?sslmode=require",
        ),
    ],
)
def test_a_unix_socket_url_reaches_libpq_with_its_empty_host(
    monkeypatch: pytest.MonkeyPatch, url: str, conninfo: str
) -> None:
    """libpq's own socket forms lost the `//` of their empty host ("postgresql:/memory")
    and were refused with a libpq parse error (an audit)."""
    from langchain_semantic_recall.storage import postgres

    opened: list[str] = []
    monkeypatch.setattr(postgres, "PostgresStorage", lambda conninfo, **_: opened.append(conninfo))
    create_storage(url)
    assert opened == [conninfo]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:s3cret@db/memory",
        "postgresql://app@db/memory?password=s3cret&sslmode=require",
        "postgresql://app@db/memory?sslmode=require&PASSWORD=s3cret",
        "postgresql://app@db/memory?sslpassword=s3cret",
    ],
)
def test_a_password_is_never_printed_wherever_the_url_gives_it(url: str) -> None:
    """A `?password=` query parameter (libpq takes it) was printed in clear by `stats`'s
    header and `RecallSettings`' repr, where `user:password@` showed `***`."""
    from langchain_semantic_recall.settings import RecallSettings
    from langchain_semantic_recall.urls import redact

    assert "s3cret" not in redact(url)
    assert "***" in redact(url)
    assert "s3cret" not in repr(RecallSettings(storage_url=url, vector_url="memory://"))


def test_the_postgres_storage_never_prints_a_password_of_its_conninfo() -> None:
    """`sslpassword` (the client key's passphrase) was left in every StorageError (a review)."""
    from langchain_semantic_recall.storage.postgres.conninfo import redacted

    shown = redacted("host=db dbname=memory user=app password=s3cret sslpassword=k3y")
    assert "s3cret" not in shown
    assert "k3y" not in shown
    assert "host=db" in shown
