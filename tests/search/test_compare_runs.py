"""`stratagem compare` on synthetic runs whose curves are known: the best speedup against
queries and money, the areas at the budget every run reached, the table, JSON and the PNG."""

from __future__ import annotations

import asyncio
import json

import pytest
from fakes import FakeEvaluator, src
from test_loop import PROBLEM, ROOT, make_loop

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.core.search import AgentCall, IterationResult, Plan
from stratagem.domains.pytorch.problem import load_problem
from stratagem.errors import ConfigError
from stratagem.report.compare import compare_runs, figure, load_curve
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore


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


def run(tmp_path, name, steps, problem_path=None):
    if problem_path is None:
        loop, store, _ = make_loop(tmp_path / name, Spender(steps), iterations=len(steps))  # type: ignore[arg-type]
    else:
        cfg = load_config(None, {"search": {"patience": 5, "iterations": len(steps)}})
        problem = load_problem(problem_path)
        store = RunStore.open(tmp_path / name / "run")
        store.add_problem(problem)
        store.start_run(problem.id, "spender", cfg.model_dump(mode="json"))
        loop = SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), Spender(steps)))  # type: ignore[arg-type]
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


def test_runs_of_one_source_match_whatever_their_files_are_called(tmp_path):
    renamed = tmp_path / "copies" / "19_relu_again.py"
    renamed.parent.mkdir()
    renamed.write_text(PROBLEM.read_text())
    a = run(tmp_path, "a", [(2, 0.1, 0.5)])
    b = run(tmp_path, "b", [(2, 0.1, 0.8)], problem_path=renamed)
    cmp = compare_runs([a, b])  # refused before: the names differ
    assert [c.problem for c in cmp.curves] == ["problem_relu", "19_relu_again"]
    assert cmp.problem == "problem_relu (also named 19_relu_again)"
    assert cmp.to_json()["problem_names"] == ["problem_relu", "19_relu_again"]
    other = run(tmp_path, "c", [(2, 0.1, 0.5)], problem_path=ROOT / "tests/fixtures/problem_linear.py")
    with pytest.raises(ConfigError, match="different problems"):
        compare_runs([a, other])


def test_the_json_lists_the_curve_the_plot_draws(tmp_path, monkeypatch):
    # A: 2.0x after 4 queries, a slower 1.25x after 6, 4.0x after 10: the best so far is 1, 2, 2, 4
    a = run(tmp_path, "a", [(4, 0.1, 0.5), (2, 0.1, 0.8), (4, 0.1, 0.25)])
    cmp = compare_runs([a])
    out = cmp.to_json()["runs"][0]
    assert [(p["queries"], p["best_speedup"]) for p in out["curve"]] == [
        (0, 1.0), (4, pytest.approx(2.0)), (10, pytest.approx(4.0)), (10, pytest.approx(4.0))]
    assert [round(p["speedup"], 2) for p in out["designs"]] == [2.0, 1.25, 4.0]  # each design's own
    drawn = []
    import matplotlib.axes

    real = matplotlib.axes.Axes.step

    def spy(self, x, y, *args, **kwargs):
        drawn.append((self.get_xlabel() or len(drawn), list(x), list(y)))
        return real(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "step", spy)
    figure(cmp)
    by_queries, by_usd = drawn
    assert by_queries[1] == [p["queries"] for p in out["curve"]] and by_queries[2] == [p["best_speedup"] for p in out["curve"]]
    assert by_usd[1] == [p["usd"] for p in out["curve"]] and by_usd[2] == by_queries[2]


def test_an_unpriced_money_axis_says_so(tmp_path):
    a = run(tmp_path, "a", [(3, None, 0.5)])
    b = run(tmp_path, "b", [(3, None, 0.8)])
    cmp = compare_runs([a, b])
    fig = figure(cmp)
    money = fig.axes[1]
    texts = " ".join(t.get_text() for t in money.texts).replace("\n", " ")
    assert "no call has a known price" in texts and "cannot be compared" in texts
    assert not money.lines  # no curve at $0 for runs that were not priced
    assert cmp.to_json()["money_note"].startswith("unpriced")
    some = compare_runs([a, run(tmp_path, "c", [(3, 0.2, 0.5)])])
    assert "not every call was priced" in " ".join(t.get_text() for t in figure(some).axes[1].texts).replace("\n", " ")


def _listing(d):
    return sorted((str(p.relative_to(d)), p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*"))


def test_reading_a_run_writes_nothing_into_it(tmp_path, capsys):
    a = run(tmp_path, "a", [(4, 0.1, 0.5), (2, 0.1, None)])
    b = run(tmp_path, "b", [(2, 0.1, 0.8)])
    before = _listing(a)
    assert not any(name.endswith(("-wal", "-shm")) for name, _, _ in before)
    assert main(["compare", str(a), str(b), "--plot", str(tmp_path / "cmp.png"), "--json"]) == 0
    assert main(["show", str(a)]) == 0 and main(["show", str(a), "--json"]) == 0
    from stratagem.report.html import load_run, version

    load_run(a)
    version(a)
    capsys.readouterr()
    assert _listing(a) == before  # no -wal/-shm, no file touched


def test_a_run_in_progress_is_read_through_its_wal(tmp_path):
    a = run(tmp_path, "a", [(2, 0.1, 0.5)])
    live = RunStore.open(a)  # a writer holds the database, as a running search does
    try:
        live.set_run_status("running")
        live.set_policy_state("k", {"n": 1})
        assert (a / "run.db-wal").exists()
        with RunStore.read(a) as r:
            assert r.run().status == "running" and r.policy_state("k") == {"n": 1}
            with pytest.raises(Exception, match="opened to read it"):
                r.set_policy_state("k", {"n": 2})
        live.set_policy_state("k", {"n": 3})
        with RunStore.read(a) as r:
            assert r.policy_state("k") == {"n": 3}
        # a killed run's WAL without its index: read from a private copy, nothing created here
        killed = tmp_path / "killed"
        killed.mkdir()
        for name in ("run.db", "run.db-wal"):
            (killed / name).write_bytes((a / name).read_bytes())
        with RunStore.read(killed) as r:
            assert r.policy_state("k") == {"n": 3}
        assert sorted(p.name for p in killed.iterdir()) == ["run.db", "run.db-wal"]
    finally:
        live.close()


def test_an_older_database_is_read_from_a_migrated_copy(tmp_path):
    import sqlite3

    a = run(tmp_path, "a", [(2, 0.1, 0.5)])
    conn = sqlite3.connect(a / "run.db")
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", ("1",))
    conn.commit()
    conn.close()
    before = _listing(a)
    with RunStore.read(a) as r:
        assert r.run() is not None and len(r.designs()) == 1
    assert _listing(a) == before
