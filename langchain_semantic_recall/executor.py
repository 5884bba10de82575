"""LangChain's `run_in_executor`, imported on first use.

It carries context variables over to the worker thread (as LangChain's own async
fallbacks do); its module loads LangChain's callbacks (~0.15 s), which the storage-only
command-line commands never need.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import ParamSpec, TypeVar

__all__ = ["run_in_executor"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def run_in_executor(
    executor: Executor | None, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """`langchain_core.runnables.config.run_in_executor`, imported when first awaited."""
    from langchain_core.runnables.config import run_in_executor as run

    return await run(executor, func, *args, **kwargs)
