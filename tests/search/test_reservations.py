"""Budget reservations: a phase of parallel queries (PIKE's) sets its queries aside first, so
however many run at once the run never goes past `max_queries`."""

from __future__ import annotations

import asyncio

import pytest
from fakes import ScriptedPolicy, src
from test_loop import make_loop

from stratagem.config import SearchConfig
from stratagem.core.search import AgentCall
from stratagem.search.budget import Budgets, Spend


def call(requests: int = 1) -> AgentCall:
    return AgentCall(role="implementor", model="m", prompt_hash="h", input_tokens=10, output_tokens=5,
                     requests=requests, cost_usd=None, messages_json="[]")


def test_a_reservation_grants_only_what_is_left_and_holds_it_from_the_rest() -> None:
    spend = Spend()
    b = Budgets(SearchConfig(max_queries=10), spend)
    assert b.remaining().queries == 10 and b.remaining().usd is None  # no money limit: None
    with b.reserve(6) as r1:
        assert (r1.asked, r1.granted) == (6, 6) and b.remaining().queries == 4
        with b.reserve(6) as r2:
            assert r2.granted == 4 and b.remaining().queries == 0
        m = b.meter()  # a call begun inside r1's context: its requests draw on r1
        assert m.admit() is None and m.admit() is None
        assert r1.used == 2 and r1.left == 4 and b.remaining().queries == 10 - 2 - 4
        m.close()
        spend.add_call(call(2))  # recorded: the same spend, now the record's
        assert r1.used == 2 and b.remaining().queries == 10 - 2 - 4
    assert b.remaining().queries == 8  # r1's unused queries came back
    with pytest.raises(ValueError):
        with b.reserve(-1):
            pass


def test_parallel_queries_inside_reservations_never_overshoot_the_query_budget(tmp_path) -> None:
    """Two phases per iteration, each launching its queries at once, as many as granted: the
    run stops at max_queries exactly, never above it, and each phase's queries are charged
    to it (tasks started inside a reservation inherit it)."""
    grants: list[tuple[int, int]] = []

    class Phased(ScriptedPolicy):
        async def iterate(self, state, session):  # type: ignore[no-untyped-def]
            async def query() -> None:
                m = session.meter()
                if m.admit() is not None:  # refused: nothing asked
                    m.close()
                    return
                await asyncio.sleep(0.01)
                m.close()
                session.record_call(call())

            async def phase(n: int) -> None:
                with session.reserve(n) as r:  # one query more than granted: the reservation refuses it
                    await asyncio.gather(*(query() for _ in range(r.granted + 1)))
                    grants.append((r.granted, r.used))

            await asyncio.gather(phase(4), phase(3))
            return await super().iterate(state, session)

    loop, _store, _ = make_loop(tmp_path, Phased([[src(str(i), 1 - i / 20)] for i in range(9)]),
                                iterations=10, max_queries=17)
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("max_queries")
    assert out.spend.queries == 17  # 7 + 7 + 3: the third iteration's phases got what was left
    assert all(granted == used for granted, used in grants)
    assert sum(g for g, _ in grants) == 17 and loop.session.budget_remaining().queries == 0
