"""The README and the docs pages it leads to run: every code block, in order, offline.

Each page of `PAGES` runs in its own temporary folder and Python namespace (a page sets
up what it uses, as a reader arriving from a link would). A page of `docs/` with Python
blocks is either in `PAGES` or in `SNIPPET_PAGES` with the reason it cannot run here.

- ``python`` blocks are executed in one namespace, as a reader pasting them would;
- ``console`` blocks are transcripts: each ``$ semantic-recall ...`` line runs (in-process,
  through ``main``) and its output must match the lines below it, where ``...`` stands
  for any text and similarity scores (``0.20``) may differ; ``$ echo $?`` prints the
  previous exit code, and any other non-zero exit code fails the test;
- ``bash`` blocks run their ``semantic-recall`` lines too; the only lines left alone are the
  set-up commands (``make demo`` / ``make test``, which would run this very suite);
- ``json`` blocks must be lines of our import format;
- blocks without a language are diagrams.
"""

from __future__ import annotations

import contextlib
import doctest
import inspect
import io
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.cli import build_parser, main
from langchain_semantic_recall.importers import read_jsonl_lines
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (
    "README.md",
    "docs/guide.md",
    "docs/surfaces.md",
    "docs/cli.md",
    "docs/writing-a-backend.md",
    "docs/retention.md",
    "docs/filtering.md",
    "docs/visible-recall.md",
)
"""Pages whose blocks run, each on its own, in order (README.md first)."""
SNIPPET_PAGES = {
    "docs/data-handling.md": "fragments on an existing `memory` (forget, move, purge)",
    "docs/deploy.md": "connects to PostgreSQL and a Chroma server",
    "docs/scale.md": "connects to PostgreSQL and a Chroma server",
    "docs/chroma-workarounds.md": "a maintainer's commands to test another chromadb version",
    "docs/migration-0.2.md": "drops the index of a store the first 0.1 builds wrote (PATH)",
}
"""Pages whose Python blocks are fragments, shown but not run, and why."""
OPTIONS_PAGE = ROOT / "docs" / "guide.md"
SETUP_COMMANDS = ("make demo", "make test")
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SCORE = re.compile(r"\b[01]\.\d\d\b")
_CHECKER = doctest.OutputChecker()
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass(frozen=True)
class Block:
    language: str
    body: str
    line: int
    """Line number of the block's first line of code in its page."""
    page: str = "README.md"


@dataclass(frozen=True)
class Step:
    command: str
    expected: str
    line: int


def blocks(page: str = "README.md") -> list[Block]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1, page)
        for m in _FENCE.finditer(text)
    ]


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def transcript(block: Block) -> list[Step]:
    """The commands of a console block, each with the output shown under it."""
    steps: list[Step] = []
    command: str | None = None
    start = block.line
    expected: list[str] = []
    for offset, line in enumerate(block.body.splitlines()):
        if line.startswith("$ "):
            if command is not None:
                steps.append(Step(command, "\n".join(expected), start))
            command, expected, start = line[2:], [], block.line + offset
        else:
            assert command is not None, f"{block.page}:{block.line}: output before any command"
            expected.append(line)
    if command is not None:
        steps.append(Step(command, "\n".join(expected), start))
    return steps


def bash_lines(block: Block) -> list[str]:
    lines = []
    for line in block.body.splitlines():
        code = line.split("  #", 1)[0].strip()
        if code and not code.startswith("#"):
            lines.append(code)
    return lines


def matches(expected: str, got: str) -> bool:
    want = _SCORE.sub("#.##", expected.strip()) + "\n"
    have = _SCORE.sub("#.##", got.strip()) + "\n"
    return _CHECKER.check_output(want, have, _FLAGS)


# --- the shape of the page (fast) ----------------------------------------------------------


def test_the_two_setup_commands_come_first() -> None:
    first = blocks()[0]
    assert first.language == "bash"
    assert bash_lines(first) == list(SETUP_COMMANDS)


def test_every_block_is_of_a_kind_this_suite_runs() -> None:
    found = all_blocks()
    assert {b.language for b in found} <= {"python", "console", "bash", "json", ""}
    assert sum(b.language == "python" for b in blocks()) >= 4  # the quickstart
    for block in found:
        if block.language == "bash":
            for line in bash_lines(block):
                assert line in SETUP_COMMANDS or line.startswith("semantic-recall "), (
                    f"{block.page}:{block.line}: {line!r} would not be run by tests/test_readme.py"
                )
        if block.language == "console":
            for step in transcript(block):
                assert step.command.startswith("semantic-recall ") or step.command == "echo $?", (
                    f"{block.page}:{step.line}: {step.command!r} would not be run"
                )


def test_every_docs_page_with_python_runs_or_says_why_not() -> None:
    pages = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
    with_python = [p for p in pages if any(b.language == "python" for b in blocks(p))]
    unaccounted = [p for p in with_python if p not in PAGES and p not in SNIPPET_PAGES]
    assert unaccounted == [], "add them to PAGES (run) or SNIPPET_PAGES (with the reason)"
    assert [p for p in PAGES if not (ROOT / p).is_file()] == []


_BENCHMARK_COMMAND = re.compile(r"python[ \t]+benchmarks/(\w+\.py)([^\n#`]*)")


def test_every_benchmark_command_the_docs_show_names_a_script_and_its_options() -> None:
    """The pages' benchmark commands (not run here: minutes to hours; smoke runs are in
    tests/test_benchmarks_smoke.py) name a script of benchmarks/ and options it has."""
    pages = [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    shared = (ROOT / "benchmarks" / "perf_common.py").read_text(encoding="utf-8")
    found, wrong = 0, []
    for page in pages:
        for match in _BENCHMARK_COMMAND.finditer(page.read_text(encoding="utf-8")):
            found += 1
            script = ROOT / "benchmarks" / match.group(1)
            if not script.is_file():
                wrong.append(f"{page.name}: {match.group(0).strip()}: no such script")
                continue
            source = script.read_text(encoding="utf-8") + shared
            wrong += [
                f"{page.name}: {match.group(0).strip()}: the script has no {flag}"
                for flag in re.findall(r"--[\w-]+", match.group(2))
                if f'"{flag}"' not in source
            ]
    assert found >= 40
    assert wrong == []


def test_the_eval_commands_of_the_quality_page_parse() -> None:
    """docs/quality.md's `semantic-recall eval` lines (minutes each: not run here)."""
    lines = [
        line
        for block in blocks("docs/quality.md")
        if block.language == "bash"
        for line in bash_lines(block)
        if line.startswith("semantic-recall ")
    ]
    assert len(lines) >= 6
    for line in lines:
        argv = shlex.split(line)[1:]
        args = build_parser(argv).parse_args(argv)  # SystemExit(2) on an unknown option
        assert args.command == "eval", line


def test_the_readme_stays_short_and_links_every_run_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") <= 250
    for page in PAGES[1:]:
        assert f"]({page})" in text, f"the README does not link {page}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its fenced blocks (a `# comment` in a bash block is no heading)."""
    return _FENCE.sub("", text)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    headings = re.findall(r"(?m)^#+ (.*)$", _prose(page.read_text(encoding="utf-8")))
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_a_comment_in_a_code_block_is_no_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n```bash\n# other languages\nx\n```\n", encoding="utf-8")
    assert _anchors(page) == {"title"}


LINKED_PAGES = (
    README,
    ROOT / "benchmarks" / "README.md",
    ROOT / "examples" / "langgraph_server" / "README.md",
)
"""Pages outside docs/ whose links are checked too."""


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in [*LINKED_PAGES, *sorted((ROOT / "docs").glob("*.md"))]:
        for link in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.name}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert broken == []


def options_table() -> dict[str, str]:
    """The rows of the options table (docs/guide.md), by option name (a row may name several)."""
    text = OPTIONS_PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Options") : text.index("## Moving to servers")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            for name in re.findall(r"`(\w+)`", line.split("|")[1]):
                rows[name] = line
    return rows


def test_the_options_table_lists_every_option_with_its_current_default() -> None:
    rows = options_table()
    names = [n for n in inspect.signature(SemanticRecall.__init__).parameters if n != "self"]
    assert [n for n in names if n not in rows] == [], "options missing from the options table"
    assert [n for n in rows if n not in names] == [], "the options table names unknown options"

    def engine(**options: Any) -> SemanticRecall:
        return SemanticRecall(
            storage=InMemoryStorage(),
            vector_store=InMemoryVectorIndex(),
            embeddings=FakeEmbeddings(),
            **options,
        )

    hybrid, dense = engine(), engine(search_mode="dense")
    keyword = engine(search_mode="keyword")
    assert hybrid.search_mode == "hybrid"
    top_k = f"{hybrid.top_k} (hybrid); {keyword.top_k} (keyword); {dense.top_k} (dense)"
    assert top_k in rows["top_k"]
    window, original = hybrid.message_range, dense.message_range
    assert f"{window.before} before, {window.after} after (hybrid" in rows["message_range"]
    words = keyword.message_range
    assert f"{words.before} and {words.after} (keyword)" in rows["message_range"]
    assert f"{original.before} and {original.after} (dense)" in rows["message_range"]
    assert f"{hybrid.message_budget} (hybrid, keyword); `None` (dense)" in rows["message_budget"]
    assert dense.message_budget is None
    assert f"| {hybrid.time_boost} |" in rows["time_boost"]
    assert f'| `"{hybrid.scope}"` |' in rows["scope"]
    assert f"LRU of {hybrid.cache.maxsize}" in rows["cache"]
    text = OPTIONS_PAGE.read_text(encoding="utf-8")
    assert f"the default is hybrid search with\n{hybrid.top_k} hits" in text
    assert hybrid.threshold is None
    assert "| `threshold` | `None` |" in text
    assert f"a budget of {hybrid.message_budget} messages" in text


def test_the_version_is_the_one_the_newest_migration_page_describes() -> None:
    """pyproject.toml's version (what `--version` reports) is the release the docs speak of."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    release = tuple(int(n) for n in project["version"].split(".")[:2])
    pages = (ROOT / "docs").glob("migration-*.md")
    newest = max(tuple(int(n) for n in p.stem.removeprefix("migration-").split(".")) for p in pages)
    major, minor = newest
    assert release == newest, f"version {project['version']}, docs/migration-{major}.{minor}.md"
    assert f"From {major}.{minor - 1}: [docs/migration-{major}.{minor}.md]" in README.read_text(
        encoding="utf-8"
    )


def test_the_readme_gives_the_unit_tiers_time_as_testing_md_and_the_makefile_do() -> None:
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    row = next(line for line in testing.splitlines() if line.startswith("| unit |"))
    found = re.search(r"within \d+ minutes?", row)
    assert found is not None, row
    said = found.group()
    assert f"`make unit` alone is the offline\ntier, {said}" in README.read_text(encoding="utf-8")
    assert f"make unit   the fast offline tier alone (tests/unit, {said}" in (
        ROOT / "Makefile"
    ).read_text(encoding="utf-8")


def test_the_readme_says_which_extras_the_notebooks_need_with_an_openai_key() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert {"notebooks", "openai"} <= extras.keys()
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert 'install `".[notebooks,openai]"`' in text


def test_json_examples_are_our_import_format() -> None:
    for block in all_blocks():
        if block.language == "json":
            report = read_jsonl_lines(block.body.splitlines())
            assert report.skipped == [], f"{block.page}:{block.line}: {report.skipped}"
            assert report.message_count == len(block.body.strip().splitlines())


def test_the_transcript_checker_allows_scores_and_ellipses() -> None:
    assert matches("#1  score 0.20  a\n...", "#1  score 0.31  a\nmore\nlines")
    assert not matches("#1  score 0.20  a", "#2  score 0.20  a")


# --- running it (the real local model) ------------------------------------------------------


class Runner:
    """Runs a page's blocks in order, with one Python namespace and one exit status."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.namespace: dict[str, Any] = {"__name__": "__readme__"}
        self.status = 0

    def python(self, block: Block) -> None:
        code = compile("\n" * (block.line - 1) + block.body, str(ROOT / block.page), "exec")
        exec(code, self.namespace)  # the page's own code, as a reader would run it
        self.capsys.readouterr()

    def command(self, command: str, line: int) -> str:
        self.capsys.readouterr()
        if command == "echo $?":  # like a shell: prints the last status, then succeeds
            shown, self.status = self.status, 0
            return f"{shown}\n"
        argv = shlex.split(command)
        assert argv[0] == "semantic-recall", f"line {line}: {command!r}"
        self.status = main(argv[1:])
        captured = self.capsys.readouterr()
        return captured.out + captured.err

    def console(self, block: Block) -> None:
        steps = transcript(block)
        for n, step in enumerate(steps):
            got = self.command(step.command, step.line)
            checked_next = n + 1 < len(steps) and steps[n + 1].command == "echo $?"
            assert self.status == 0 or checked_next, (
                f"{block.page}:{step.line}: {step.command!r} exited {self.status}:\n{got}"
            )
            assert matches(step.expected, got), (
                f"{block.page}:{step.line}: the output of {step.command!r} is not what the "
                f"page shows.\n--- page\n{step.expected}\n--- actual\n{got}"
            )

    def bash(self, block: Block) -> None:
        for line in bash_lines(block):
            if line in SETUP_COMMANDS:
                continue  # `make test` runs this suite; `make demo` is `semantic-recall demo`
            got = self.command(line, block.line)
            assert self.status == 0, (
                f"{block.page}:{block.line}: {line!r} exited {self.status}:\n{got}"
            )


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs_in_order(
    page: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in (
        "SEMANTIC_RECALL_PATH",
        "SEMANTIC_RECALL_STORAGE_URL",
        "SEMANTIC_RECALL_VECTOR_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    runner = Runner(capsys)
    ran = 0
    for block in blocks(page):
        if block.language == "python":
            runner.python(block)
        elif block.language == "console":
            runner.console(block)
        elif block.language == "bash":
            runner.bash(block)
        else:
            continue
        ran += 1
    assert ran == sum(b.language in {"python", "console", "bash"} for b in blocks(page))


_DOCS_MENTION = re.compile(r"\bdocs/([\w.-]+\.md)(?:#([\w-]+))?")


def test_every_docs_page_the_code_names_exists_with_its_heading() -> None:
    """Docstrings and messages point readers to `docs/page.md#heading`: both must exist."""
    sources = [*(ROOT / "langchain_semantic_recall").rglob("*.py")]
    sources += [*(ROOT / "benchmarks").glob("*.py"), ROOT / "Makefile"]
    broken, found = [], 0
    for source in sources:
        for page, anchor in _DOCS_MENTION.findall(source.read_text(encoding="utf-8")):
            found += 1
            target = ROOT / "docs" / page
            if not target.is_file():
                broken.append(f"{source.name}: docs/{page}")
            elif anchor and anchor not in _anchors(target):
                broken.append(f"{source.name}: docs/{page}#{anchor} (no such heading)")
    assert found >= 20
    assert broken == []


_INLINE_COMMAND = re.compile(r"`(semantic-recall [^`]+)`")


def _parse_error(argv: list[str]) -> str | None:
    """argparse's complaint about `argv` (None: it parses)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser(argv).parse_args(argv)
    except SystemExit as exit_:
        if exit_.code:
            return err.getvalue().strip() or f"exit {exit_.code}"
    return None


def test_every_command_the_pages_name_has_the_options_they_give_it() -> None:
    """An inline `semantic-recall ...` may leave out what a command requires (it names the
    command in prose), but not name a command or an option the command line lacks."""
    pages = [*LINKED_PAGES, *sorted((ROOT / "docs").glob("*.md"))]
    found, wrong = 0, []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in _INLINE_COMMAND.finditer(text):
            found += 1
            argv = shlex.split(re.sub(r"[\[\]]", "", match.group(1)))[1:]
            error = _parse_error(argv)
            if error and ("unrecognized arguments" in error or "invalid choice" in error):
                line = text.count("\n", 0, match.start()) + 1
                wrong.append(f"{page.name}:{line}: {match.group(1)}: {error.splitlines()[-1]}")
    assert found >= 30
    assert wrong == []


def test_the_command_check_finds_an_unknown_option() -> None:
    error = _parse_error(["search", "q", "--resource", "r", "--treshold", "0.5"])
    assert error is not None
    assert "unrecognized arguments" in error
    assert _parse_error(["search", "q", "--resource", "r"]) is None


def test_every_test_the_pages_cite_exists() -> None:
    """A page or docstring citing `test_x` (a file or a test) as its proof names a real one."""
    tests = ROOT / "tests"
    names = {p.stem for p in tests.rglob("test_*.py")}
    for path in tests.rglob("*.py"):
        names |= set(
            re.findall(
                r"(?m)^\s*(?:async )?(?:def|class) (test_\w+)", path.read_text(encoding="utf-8")
            )
        )
    sources = [
        README,
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "langchain_semantic_recall").rglob("*.py"),
    ]
    cited = {
        (source.name, name)
        for source in sources
        for name in re.findall(r"\btest_[a-z0-9_]+\b", source.read_text(encoding="utf-8"))
    }
    assert len(cited) >= 20
    assert sorted((page, name) for page, name in cited if name not in names) == []
