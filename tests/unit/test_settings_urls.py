"""Store URLs and settings: a URL the package would misread is refused (no Chroma, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.settings import create_storage, create_vector_index


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
