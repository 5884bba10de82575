"""The ``semantic-recall`` command line: one subcommand per module, registered below."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from langchain_semantic_recall.errors import SemanticRecallError

# Each subcommand module exposes ``register(subparsers) -> None`` and sets ``func``.
_SUBCOMMANDS = ("demo",)

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

DEFAULT_PATH = os.environ.get("SEMANTIC_RECALL_PATH", "./.semantic-recall")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semantic-recall",
        description="Look inside, load and evaluate the semantic memory of your agents.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log warnings and details")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from importlib import import_module

    for name in _SUBCOMMANDS:
        import_module(f"langchain_semantic_recall.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:  # only the CLI configures logging; the library never does
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except SemanticRecallError as error:
        print(f"semantic-recall: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
