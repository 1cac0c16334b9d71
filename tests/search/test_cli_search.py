"""`stratagem show`, `resume` and `run` option handling (the loop itself: test_loop.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from fakes import FakeEvaluator, ScriptedPolicy, src

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/fixtures/problem_relu.py"


def fake_run(run_dir: Path) -> None:
    cfg = load_config(None, {"search": {"iterations": 2}})
    problem = load_problem(PROBLEM)
    with RunStore.open(run_dir) as store:
        store.add_problem(problem)
        store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
        policy = ScriptedPolicy([[src("a", 0.5), src("b", invalid="nan")], [src("c", 0.25)]])
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), policy)).run())  # type: ignore[arg-type]


def test_show_json(tmp_path, capsys):
    fake_run(tmp_path / "r")
    assert main(["show", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problem"] == "problem_relu" and out["status"] == "finished"
    assert out["iterations"] == 2 and out["designs"] == 3 and out["valid"] == 2
    # the figure every view shows: the confirmation round's (the fake round times 4.0x as 3.99x),
    # the search-time one beside it
    assert out["best"]["speedup"] == out["headline"]["vs"]["reference"]["ratio"] == 3.99
    assert out["best"]["confirmed"]["search"]["ratio"] == 4.0
    assert out["strategies"] == {"innovate": {"designs": 3, "valid": 2}}
    assert out["reference_ms"] == {"eager": 1.0, "compile": 0.8}


def test_show_table(tmp_path, capsys):
    fake_run(tmp_path / "r")
    assert main(["show", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "Leaderboard" in out and "4.00x [3.96, 4.04]" in out and "Strategies" in out
    assert "Iterations" in out and "2.00x [1.98, 2.02]" in out  # the best after iteration 1


def test_show_and_resume_need_a_run_directory(tmp_path, capsys):
    # a mistyped RUN_DIR is a usage error (2); a directory without a run database a store error (1)
    assert main(["show", str(tmp_path / "nothing")]) == 2
    assert main(["resume", str(tmp_path / "nothing")]) == 2
    assert "no such directory" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["show", str(tmp_path / "empty")]) == 1
    assert main(["resume", str(tmp_path / "empty")]) == 1
    assert "holds no run database" in capsys.readouterr().out


def test_run_rejects_bad_options(tmp_path, capsys):
    assert main(["run", str(PROBLEM), "--policy", "auto", "--run-dir", str(tmp_path / "r")]) == 2
    assert "needs a model" in capsys.readouterr().out
    assert not (tmp_path / "r").exists()
    assert main(["run", str(PROBLEM), "--policy", "nonsense", "--run-dir", str(tmp_path / "r2")]) == 2
    assert main(["run", str(PROBLEM), "--iterations", "0", "--run-dir", str(tmp_path / "r3")]) == 2
    assert main(["run", str(tmp_path / "missing.py"), "--run-dir", str(tmp_path / "r4")]) == 2


def test_run_directory_of_another_problem_is_refused(tmp_path, capsys):
    fake_run(tmp_path / "r")
    other = ROOT / "examples/01_elementwise/problem.py"
    assert main(["run", str(other), "--run-dir", str(tmp_path / "r"), "--device", "cpu"]) == 1
    assert "another problem" in capsys.readouterr().out


def test_every_run_option_can_come_from_the_toml_file(tmp_path):
    from stratagem.config import load_config
    from stratagem.domains.pytorch.settings import settings

    toml = tmp_path / "run.toml"
    toml.write_text(
        '[evaluation]\ndevice = "cpu"\n[pytorch]\nintegrity = "strict"\n'
        '[search]\npolicy = "auto"\niterations = 7\npatience = 2\nimplementors = 3\nmax_queries = 50\n'
        'max_tokens = 9000\nmax_usd = 1.5\nmax_gpu_seconds = 60\nmax_wall_seconds = 600\n'
        f'run_dir = "{tmp_path / "r"}"\n'
        '[agents]\nmodel = "m"\nendpoints = ["http://127.0.0.1:1/v1"]\n'
    )
    cfg = load_config(toml)
    s = cfg.search
    assert (s.policy, s.iterations, s.patience, s.implementors, s.max_queries, s.max_tokens) == \
        ("auto", 7, 2, 3, 50, 9000)
    assert (s.max_usd, s.max_gpu_seconds, s.max_wall_seconds, s.run_dir) == (1.5, 60, 600, tmp_path / "r")
    assert cfg.agents.endpoints == ["http://127.0.0.1:1/v1"] and settings(cfg.evaluation).integrity == "strict"
    # The command line wins.
    over = load_config(toml, {"search": {"iterations": 2, "run_dir": tmp_path / "x"}, "agents": {"model": "n"}})
    assert over.search.iterations == 2 and over.search.run_dir == tmp_path / "x" and over.agents.model == "n"
    assert over.search.implementors == 3


def test_unknown_recipe_is_refused_before_the_run_directory_exists(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('[search]\nrecipes = ["compile", "warp-speed"]\n')
    code = main(["run", str(PROBLEM), "--device", "cpu", "--config", str(cfg), "--run-dir", str(tmp_path / "r")])
    assert code == 2
    assert "warp-speed" in capsys.readouterr().out
    assert not (tmp_path / "r").exists()


def test_a_problem_whose_reference_fails_stops_the_run_with_a_clear_error(tmp_path, capsys):
    problem = ROOT / "tests/fixtures/problem_broken_reference.py"
    code = main(["run", str(problem), "--device", "cpu", "--run-dir", str(tmp_path / "r")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 2, out
    # The baselines are measured before the first plan, so the broken reference stops it there
    assert "the reference cannot be timed" in out and "mat1 and mat2 shapes cannot be multiplied" in out
    from stratagem.store.sqlite import RunStore
    with RunStore.open(tmp_path / "r") as store:
        assert store.run().status == "interrupted"
        assert len(store.evaluations()) == 0  # stopped before the first plan, no design spent


def test_show_json_has_the_whole_run_as_documented(tmp_path, capsys):
    """docs/show-json.md: every design, every iteration with its plan and the best after it,
    and the spend with queries (requests) and calls (agent calls) named apart."""
    fake_run(tmp_path / "r")
    assert main(["show", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"run_dir", "problem", "domain", "objective", "status", "stop_reason", "iterations", "designs",
            "valid", "unstable", "best", "beats_reference", "reference_ms", "strategies", "spend",
            "leaderboard", "all_designs", "iteration_log"} <= set(out)
    designs = out["all_designs"]
    assert len(designs) == 3
    for d in designs:
        assert {"id", "status", "speedup", "speedup_ci", "iteration", "author", "strategy", "parents",
                "created_at", "measures", "tags", "stability"} <= set(d)
        assert {"runtime_q1_ms", "runtime_q3_ms", "reference_ms", "compile_s", "max_abs_err", "max_rel_err",
                "failures", "kernels"} <= set(d["measures"])
    bad = next(d for d in designs if d["status"] == "invalid")
    assert bad["failed_at"] == "correctness" and bad["reason"].endswith("nan")
    assert bad["measures"]["failures"] == ["correctness (wrong_output): nan"]
    good = next(d for d in designs if d["speedup"] == 3.99)  # confirmed (search time 4.0)
    assert good["measures"]["runtime_q1_ms"] == 0.25 and good["measures"]["reference_ms"] == 1.0
    log = out["iteration_log"]
    assert [it["n"] for it in log] == [1, 2]
    assert log[0]["plan"]["strategy"] == "innovate" and "variants" in log[0]["plan"]
    assert log[0]["best_after"]["speedup"] == 2.0 and log[1]["best_after"]["speedup"] == 4.0
    assert set(log[0]["context"]) == {"best", "worst", "recent", "failed"} or log[0]["context"] == {}
    spend = out["spend"]
    assert {"queries", "calls", "unpriced_calls", "failed_calls", "retries", "tokens", "usd", "gpu_seconds",
            "evaluations"} <= set(spend)
    assert spend["evaluations"] == 3 and spend["calls"] == 0 and spend["queries"] == 0


def test_a_json_run_stopped_by_a_signal_still_writes_one_json_record(capsys) -> None:
    """Seen in the suite: a SIGTERM that reached a `redteam --json` run stopped it cleanly (exit
    130) with nothing on stdout, and the caller's JSON decode failed; the stop is a record too."""
    import pytest
    import typer
    from rich.console import Console

    from stratagem.cli.search import stopping_cleanly

    with pytest.raises(typer.Exit) as e:
        with stopping_cleanly(Console(stderr=True), True, "continue with `stratagem resume R`"):
            raise KeyboardInterrupt
    assert e.value.exit_code == 130
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "interrupted" and "stratagem resume R" in body["next"]
