"""A baseline whose timing does not settle is re-timed like a candidate, is never reused from
the cache, and every speedup chained through it says so (on the CPU; stability rules that no
measurement meets stand in for a noisy machine)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from fakes_path import FakeEvaluator, ScriptedPolicy, make_loop, src  # noqa: F401

from stratagem.cli import main
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.settings import StabilityConfig, settings
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

PAIRED = Path(__file__).resolve().parents[1] / "fixtures" / "paired"
ANCHOR = Path(__file__).resolve().parents[1] / "fixtures" / "anchor"


def test_an_unstable_eager_baseline_is_retimed_and_measured_again_next_time(cpu_config) -> None:
    """Eager timed alone: judged unstable (a drift limit no measurement meets), it is timed
    again with twice the budget, then four times; still unstable, it is kept with every
    attempt, and the next invocation measures it again instead of reading it from the cache."""
    timing = settings(cpu_config).timing.model_copy(update={"budget_ms": 40, "max_retimes": 2,
                                                   "stability": StabilityConfig(drift_max=1e-9)})
    cfg = cpu_config.model_copy(update={"timing": timing})
    ev = Evaluator(cfg, LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"}), "cpu")
    problem = load_problem(PAIRED / "problem.py")
    first = asyncio.run(ev.baseline(problem))
    eager = first.modes["eager"]
    assert [a["budget_ms"] for a in eager["attempts"]] == [40, 80, 160]
    # the drift limit no measurement meets is among the reasons (a loaded machine may add
    # clusters before it; a last attempt of under MIN_JUDGED calls says it is too few to judge)
    why = first.unstable().get("eager") or ()
    assert any("drift" in r or "too few to judge" in r for r in why), why
    again = asyncio.run(ev.baseline(problem))
    assert not again.cached  # an unstable baseline is never served from the cache

    stable = cpu_config  # default rules: a settled baseline is cached and served from there
    ev2 = Evaluator(stable, LocalExecutor.for_devices(["cpu"], stable, {"PATH": "/usr/bin:/bin"}), "cpu")
    measured = asyncio.run(ev2.baseline(problem, refresh=True))
    if not measured.unstable():  # the machine may be noisy; when it settled, it is reused
        assert asyncio.run(ev2.baseline(problem)).cached


def test_a_compile_baseline_that_stays_unstable_is_flagged_beside_every_ratio(capsys, tmp_path) -> None:
    """torch.compile paired with eager, judged unstable on every attempt (an interval limit no
    measurement meets): its three attempts are kept, and `eval --json` marks the speedup over
    it `baseline_unstable` while the paired speedup over eager carries no such mark."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[evaluation]\ndevice = "cpu"\n[pytorch]\nbaselines = ["eager", "compile"]\ncorrectness_trials = 2\n'
                   "[pytorch.timing]\nwarmup_ms = 5\nbudget_ms = 20\nmin_reps = 3\nmax_reps = 50\n"
                   "pairs = 6\nmax_retimes = 2\n[pytorch.timing.stability]\nci_max = 1e-9\n")
    code = main(["eval", str(ANCHOR / "exact_problem.py"), str(ANCHOR / "exact_same.py"), "--config", str(cfg),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "valid", out["failures"]
    attempts = out["baseline"]["unstable"]
    assert "compile" in attempts and "interval" in attempts["compile"][0]
    assert "interval" in out["speedups"]["compile"]["baseline_unstable"]
    assert "baseline_unstable" not in out["speedups"]["eager"]


def test_an_unstable_compile_baseline_is_flagged_in_show_and_the_context(tmp_path, capsys) -> None:
    from stratagem.context.render import render_design

    why = "ratio drift: the first half's median 3.951 and the second half's 2.835 differ by 39%"
    ev = FakeEvaluator(compared_unstable=why)
    # the search-time flag (a confirmation round re-times compile and its figure replaces this one)
    loop, store, _ = make_loop(tmp_path, ScriptedPolicy([[src("a", 0.5)]]), ev, iterations=1, confirm_top=0)
    asyncio.run(loop.run())
    assert main(["show", str(store.run_dir)]) == 0
    text = capsys.readouterr().out
    # the leaderboard marks the ratio (`*`) and says why under it
    assert "1.60x * [1.58, 1.62]" in text and "stayed unstable after re-timing" in text and "carry its noise" in text
    assert main(["show", str(store.run_dir), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["compile_unstable"].startswith("ratio drift")
    view = loop.session.views()[0]
    assert view.compared_text("compile") == "1.60x (compile baseline unstable)"
    assert "timing unstable" in render_design(view, domain="pytorch")
