"""The `semantic-recall` command line: subcommand modules, registered below.

Each module in `_SUBCOMMANDS` exposes `register(subparsers) -> None`, adds one or more
subcommands and sets `func` (`args -> exit code`) on each. Shared pieces (exit codes,
`--path`, opening the store) live in `langchain_semantic_recall.cli.common`.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from langchain_semantic_recall.cli.common import (
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    INDEX_NAME_HELP,
    PATH_ENV,
    STORAGE_HELP,
    VECTOR_HELP,
    VERBOSE_HELP,
    CommandError,
    a_path,
    command_scope,
    store_path,
)
from langchain_semantic_recall.cli.render import error, failure_message, style, with_notes
from langchain_semantic_recall.errors import InvalidOptionError, SemanticRecallError, StorageError
from langchain_semantic_recall.quoting import printable

__all__ = [
    "DEFAULT_PATH",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "store_path",
]

# Modules that register subcommands, in the order ``--help`` lists them.
_SUBCOMMANDS = (
    "demo",
    "ingest",
    "search",  # search, inspect
    "threads",  # threads, show
    "admin",  # stats, forget, reindex
    "purge",
    "export",
    "eval",
    "migrate",
)

DEFAULT_PATH = os.environ.get(PATH_ENV) or "./.semantic-recall"
"""The store used without `--path` (read at import; `store_path(args)` reads it per call)."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `semantic-recall` parser: global options, then one subparser per command.

    `eval`'s options read their defaults from the engine (numpy, LangChain): they are
    added only when `argv` runs `eval` (all of them when `argv` is None), so that
    `--help` and the other commands start fast.
    """
    parser = argparse.ArgumentParser(
        prog="semantic-recall",
        description=(
            "Look inside, load and evaluate the semantic memory of your agents.\n"
            "Every command works on one store, chosen with --path\n"
            f"(default: ${PATH_ENV}, else ./.semantic-recall)."
        ),
        epilog=EXIT_CODES_HELP + "\nRun 'semantic-recall COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--path",
        metavar="DIR",
        type=a_path,
        help=f"the store (default: ${PATH_ENV}, else ./.semantic-recall)",
    )
    parser.add_argument(
        "--storage",
        dest="storage_url",
        metavar="URL",
        help=STORAGE_HELP,
    )
    parser.add_argument(
        "--vector",
        dest="vector_url",
        metavar="URL",
        help=VECTOR_HELP,
    )
    parser.add_argument("--index-name", metavar="NAME", help=INDEX_NAME_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from importlib import import_module

    for name in _SUBCOMMANDS:
        module = import_module(f"langchain_semantic_recall.cli.{name}")
        if name == "eval":
            module.register(subparsers, detailed=argv is None or "eval" in argv)
        else:
            module.register(subparsers)
    return parser


def _version() -> str:
    import langchain_semantic_recall

    return str(langchain_semantic_recall.__version__)


class _Stopped(SystemExit):
    """The command was stopped by SIGTERM (its exit code: 143)."""


def _next_step(args: argparse.Namespace) -> str:
    """What to do after the command was interrupted (its `interrupted` default), if any."""
    hint = getattr(args, "interrupted", None)
    return f": {hint}" if hint else ""


@contextmanager
def _sigterm_ends_the_command() -> Iterator[None]:
    """SIGTERM ends the command as Ctrl-C does: what it opened is closed, exit code 143.

    Its default action ends the process where it stands, so a read-only open (`search`,
    `inspect`) left its private copy of the Chroma folder, every message's text, in the
    temporary folder. Only in the main thread (where Python handles signals); the
    previous handler is put back after the command.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _OneLine(logging.Formatter):
    """A warning of the package as one line: its traceback is for `-v`."""

    def format(self, record: logging.LogRecord) -> str:
        label = style("semantic-recall: warning:", "yellow", stream=sys.stderr)
        return f"{label} {printable(record.getMessage())}"


class _FewOfEach(logging.Filter):
    """The first `SHOWN` warnings of each kind (one format string) pass; the rest are counted.

    An `ingest` whose vector store went away warned once per batch (75 lines for 4,000
    messages) before its error (an audit): the kind is said a few times, then counted.
    """

    SHOWN = 3

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = str(record.msg)
        self.seen[kind] = self.seen.get(kind, 0) + 1
        return self.seen[kind] <= self.SHOWN

    def untold(self) -> list[str]:
        """One line per kind of warning that was not shown every time."""
        return [
            f"{count - self.SHOWN} more warning(s) like {printable(kind)[:60]!r}... "
            "not shown (-v shows every one)"
            for kind, count in self.seen.items()
            if count > self.SHOWN
        ]


@contextmanager
def _warnings_in_one_line(verbose: bool) -> Iterator[None]:
    """Without `-v`, the package's warnings print as one line each, without a traceback.

    With no handler configured, Python's last-resort handler printed each with its
    traceback (an `ingest` whose embedder failed: one per batch, before its summary).
    They do not reach the root logger meanwhile: one that an earlier `-v` (or the program
    calling `main`) configured would print each again, traceback and all.
    """
    if verbose:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine())
    few = _FewOfEach()
    handler.addFilter(few)
    package = logging.getLogger("langchain_semantic_recall")
    package.addHandler(handler)
    propagated, package.propagate = package.propagate, False
    try:
        yield
    finally:
        package.propagate = propagated
        package.removeHandler(handler)
        label = style("semantic-recall: warning:", "yellow", stream=sys.stderr)
        for line in few.untold():
            print(f"{label} {line}", file=sys.stderr)


_FLAGS = {
    "search_mode": "--search-mode",
    "time_boost": "--time-boost",
    "top_k": "--top-k",
    "message_range.before": "--before",
    "message_range.after": "--after",
    "message_budget": "--message-budget",
    "threshold": "--threshold",
    "scope": "--scope",
}
_OPTION = re.compile(rf"\b({'|'.join(map(re.escape, _FLAGS))})(?:=('?)([^',;:)\s]+)\2|\b(?!=))")


def in_flags(message: str, typed: Sequence[str] = ()) -> str:
    """An engine option's error in the words of the command line: its flags, not Python's.

    `time_boost=0.3 ...: use search_mode='hybrid'` reads `--time-boost 0.3 ...: use
    --search-mode hybrid`. "threshold" and "scope" alone are English words: only their
    `name=value` form is rewritten. `search` and `inspect` give the window as `--range`,
    `eval` as `--before` and `--after`: the one `typed` (the command line) holds.
    """
    ranged = "--range" in typed

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(3)
        if value is None and name in ("threshold", "scope"):
            return match.group(0)
        option = "--range" if ranged and name.startswith("message_range") else _FLAGS[name]
        return option if value is None else f"{option} {value}"

    return _OPTION.sub(flag, message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (see `--help`)."""
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help / --version (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    if args.verbose:  # only the CLI configures logging; the library never does
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        # The warnings' handler outlives the scope: closing the backends may warn too.
        with _warnings_in_one_line(args.verbose), _sigterm_ends_the_command(), command_scope():
            return func(args)
    except CommandError as failure:
        error(str(failure))
        return failure.code
    except InvalidOptionError as failure:
        error(in_flags(str(failure), sys.argv[1:] if argv is None else argv))
        return EXIT_USAGE
    except SemanticRecallError as failure:
        # A backend that failed part way (StorageError): how to finish, as after Ctrl-C.
        then = _next_step(args).replace(":", ";", 1) if isinstance(failure, StorageError) else ""
        error(with_notes(failure) + then)
        return EXIT_ERROR
    except KeyboardInterrupt:
        error("interrupted" + _next_step(args))
        return EXIT_INTERRUPTED
    except _Stopped as stopped:
        error("stopped by SIGTERM" + _next_step(args))
        return int(stopped.code or 0)
    except BrokenPipeError:  # e.g. `semantic-recall export ... | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep the interpreter's flush quiet
        return EXIT_ERROR
    except OSError as failure:
        error(f"{failure.strerror or failure}: {failure.filename or ''}".rstrip(": "))
        return EXIT_ERROR
    except BaseException as failure:  # a Rust panic (chromadb, the tokenizer) is no Exception
        if not isinstance(failure, Exception) and type(failure).__name__ != "PanicException":
            raise
        if args.verbose:
            traceback.print_exc()
        error(failure_message(failure, verbose=args.verbose))
        return EXIT_ERROR
