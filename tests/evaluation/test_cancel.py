"""Reaping a helper task (the judge) never swallows a cancellation of the caller's own: a
Ctrl-C that arrived while an evaluation waited for its cancelled judge was eaten there, and
the run finished with exit 0 instead of stopping with 130 (tests/search/test_cli_kill.py,
seen under load)."""

from __future__ import annotations

import asyncio

import pytest

from stratagem.evaluation.sandbox import reap


def test_a_cancel_while_reaping_reaches_the_caller() -> None:
    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # a judge killing its process takes a moment
            raise

    async def caller() -> str:
        child = asyncio.create_task(slow_to_stop())
        await asyncio.sleep(0.01)
        await reap(child)
        return "went on"

    async def main() -> None:
        task = asyncio.create_task(caller())
        await asyncio.sleep(0.1)  # the caller is inside reap now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_reaping_drops_the_childs_own_outcome() -> None:
    async def fails() -> None:
        await asyncio.sleep(10)

    async def main() -> str:
        child = asyncio.create_task(fails())
        await asyncio.sleep(0.01)
        await reap(child)
        return "went on"

    assert asyncio.run(main()) == "went on"
