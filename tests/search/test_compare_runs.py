"""`stratagem compare` on synthetic runs whose curves are known: the best speedup against
queries and money, the areas at the budget every run reached, the table, JSON and the PNG."""

from __future__ import annotations

import asyncio
import json

import pytest
from fakes import src
from test_loop import make_loop

from stratagem.cli import main
from stratagem.core.search import AgentCall, IterationResult, Plan
from stratagem.report.compare import compare_runs, load_curve


class Spender:
    """Each iteration records `queries` agent calls at `usd` each, then evaluates one design."""

    name = "spender"

    def __init__(self, steps: list[tuple[int, float | None, float | None]]) -> None:
        self.steps = steps  # (queries, usd per query, design runtime_ms or None for a failed one)

    async def iterate(self, state, session):
        q, usd, ms = self.steps[state.iteration - 1]
        for _ in range(q):
            session.record_call(AgentCall(role="optimize", model="m", prompt_hash="h", requests=1, cost_usd=usd))
        tag = f"it{state.iteration}"
        fb = await session.evaluate(src(tag, ms) if ms else src(tag, invalid="wrong"), strategy="optimize")
        return IterationResult(plan=Plan("x"), design_ids=(fb.design_id,), exhausted=state.iteration == len(self.steps))

    async def review(self, design, state, session):
        return None


def run(tmp_path, name, steps):
    loop, store, _ = make_loop(tmp_path / name, Spender(steps), iterations=len(steps))  # type: ignore[arg-type]
    asyncio.run(loop.run())
    store.close()
    return tmp_path / name / "run"


def test_curves_and_areas_at_equal_budgets(tmp_path):
    # A: 2.0x after 4 queries, 4.0x after 10; B: 1.25x after 2, nothing better, 8 queries in all
    a = run(tmp_path, "a", [(4, 0.1, 0.5), (6, 0.1, 0.25)])
    b = run(tmp_path, "b", [(2, 0.5, 0.8), (6, 0.5, None)])
    ca = load_curve(a)
    assert [(p.queries, p.speedup) for p in ca.points] == [(4, pytest.approx(2.0)), (10, pytest.approx(4.0))]
    assert ca.best_at(3, "queries") == 1.0 and ca.best_at(4, "queries") == pytest.approx(2.0)
    cmp = compare_runs([a, b])
    assert cmp.query_budget == 8  # the smaller total: both are compared over 8 queries
    # A: 1.0 for 4 queries then 2.0 for 4 -> mean 1.5; B: 1.0 for 2 then 1.25 for 6 -> 1.1875
    assert cmp.area(cmp.curves[0], "queries") == pytest.approx(1.5)
    assert cmp.area(cmp.curves[1], "queries") == pytest.approx(1.1875)
    # money: A spent $1.0, B $4.0; over $1.0 A is 1.0 until $0.4, then 2.0 -> 1.6; B 1.0 until $1.0
    assert cmp.usd_budget == pytest.approx(1.0)
    assert cmp.area(cmp.curves[0], "usd") == pytest.approx(1.6)
    assert cmp.area(cmp.curves[1], "usd") == pytest.approx(1.0)


def test_unpriced_runs_compare_on_queries_only(tmp_path):
    a = run(tmp_path, "a", [(3, None, 0.5)])
    b = run(tmp_path, "b", [(3, 0.2, 0.5)])
    cmp = compare_runs([a, b])
    assert cmp.usd_budget is None and cmp.area(cmp.curves[0], "usd") is None
    assert cmp.area(cmp.curves[0], "queries") == pytest.approx(cmp.area(cmp.curves[1], "queries"))


def test_the_cli_prints_json_and_writes_the_plot(tmp_path, capsys):
    a = run(tmp_path, "a", [(4, 0.1, 0.5)])
    b = run(tmp_path, "b", [(2, 0.1, 0.8)])
    png = tmp_path / "cmp.png"
    assert main(["compare", str(a), str(b), "--plot", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["query_budget"] == 2 and len(out["runs"]) == 2 and out["runs"][0]["policy"] == "spender"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", str(a), "--plot", str(png)]) == 0
    assert "mean best" in capsys.readouterr().out


def test_a_directory_that_is_not_a_run_is_refused_with_its_name(tmp_path, capsys):
    assert main(["compare", str(tmp_path), "--json"]) == 2
    assert str(tmp_path) in capsys.readouterr().out
