"""`stratagem bench`: finding a suite's problems (KernelBench levels and ids, PIKE folders,
folders of problems with command problems), a real CPU suite with the `recipes` policy (one
shared evaluator, the manifest, `--json`, `report --suite SUITE_DIR`), resume after a kill
between problems and of an unfinished problem, and the aggregate maths on synthetic rows."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path

import pytest

from stratagem.cli import main
from stratagem.errors import ConfigError
from stratagem.report.suite import ProblemRow, fast_p, summary, union_s
from stratagem.search import suite as suite_mod
from stratagem.search.suite_manifest import read_manifest, write_manifest
from stratagem.search.suite_problems import find_problems, parse_ids, parse_levels
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures"

# One cheap recipe, one iteration, no confirmation round: a problem costs a baseline and one design.
FAST_TOML = """\
[evaluation]
device = "cpu"
[pytorch]
baselines = ["eager"]
correctness_trials = 2
[pytorch.timing]
warmup_ms = 5
budget_ms = 20
min_reps = 3
max_reps = 30
[search]
iterations = 1
confirm_top = 0
recipes = ["inference_mode"]
"""


def _problem(dim: int) -> str:
    src = (FIXTURES / "paired/problem.py").read_text()
    return src.replace("batch_size = 384", f"batch_size = {dim}").replace("dim = 384", f"dim = {dim}")


@pytest.fixture
def tiny_suite(tmp_path: Path) -> Path:
    d = tmp_path / "problems"
    d.mkdir()
    (d / "1_tanh_small.py").write_text(_problem(96))
    (d / "2_tanh_medium.py").write_text(_problem(128))
    (d / "notes.py").write_text("X = 1\n")  # not a problem: no class Model
    return d


@pytest.fixture
def fast_toml(tmp_path: Path) -> Path:
    p = tmp_path / "fast.toml"
    p.write_text(FAST_TOML)
    return p


# -- finding problems ---------------------------------------------------------------------------


def _kb_tree(root: Path) -> Path:
    for level, names in {"level1": ["1_Matmul.py", "2_ReLU.py", "19_Softmax.py"], "level2": ["1_Conv_ReLU.py"],
                         "level3-pike": ["3_MLP.py"], "level5": ["1_Frontier.py"]}.items():
        (root / "KernelBench" / level).mkdir(parents=True)
        for n in names:
            (root / "KernelBench" / level / n).write_text(_problem(8))
    (root / "README.md").write_text("a checkout")
    return root


def test_kernelbench_levels_and_problem_ids(tmp_path: Path) -> None:
    root = _kb_tree(tmp_path / "kb")
    keys = [p.key for p in find_problems(root, parse_levels("1"), parse_ids("1-2"))]
    assert keys == ["level1-1_Matmul", "level1-2_ReLU"]
    every = find_problems(root, parse_levels("1,2"))
    assert [(p.level, p.number) for p in every] == [("1", 1), ("1", 2), ("1", 19), ("2", 1)]
    assert all(Path(p.path).is_absolute() and Path(p.path).is_relative_to(root.resolve()) for p in every)
    listed = tmp_path / "ids.txt"
    listed.write_text("# the hard ones\n19\n2\n")
    assert [p.key for p in find_problems(root, ["1"], parse_ids(str(listed)))] == ["level1-2_ReLU", "level1-19_Softmax"]
    # PIKE's folders: by level name, or a level folder given directly
    assert [p.key for p in find_problems(root, parse_levels("3-pike,level5"))] == ["level3-pike-3_MLP", "level5-1_Frontier"]
    assert [p.key for p in find_problems(root / "KernelBench/level3-pike")] == ["level3-pike-3_MLP"]
    assert len(find_problems(root)) == 6  # every level found
    with pytest.raises(ConfigError, match="no level folder for --levels 4"):
        find_problems(root, ["4"])
    with pytest.raises(ConfigError, match="no problems found"):
        find_problems(root, ["1"], parse_ids("50-60"))
    with pytest.raises(ConfigError, match="neither a problem id nor a range"):
        parse_ids("1-x")


def test_a_folder_of_problems_with_command_problems() -> None:
    found = {p.key: p for p in find_problems(ROOT / "examples")}
    assert {"01_elementwise", "06_fused_block", "command-window_sums"} <= set(found)
    assert Path(found["command-window_sums"].path).name == "window_sums"  # the directory holding problem.toml
    assert Path(found["01_elementwise"].path).name == "problem.py"
    assert not any("candidates" in str(p.path) for p in found.values())  # candidate files are not problems


# -- a real suite on the CPU ---------------------------------------------------------------------


def test_bench_runs_a_folder_on_the_cpu_with_one_evaluator(tiny_suite, fast_toml, tmp_path, capsys, monkeypatch):
    made = []
    real = suite_mod.make_evaluator

    def counting(cfg):  # type: ignore[no-untyped-def]
        made.append(cfg)
        return real(cfg)

    monkeypatch.setattr(suite_mod, "make_evaluator", counting)
    out_dir = tmp_path / "suite"
    code = main(["bench", str(tiny_suite), "--config", str(fast_toml), "--jobs", "2", "--run-dir", str(out_dir),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert len(made) == 1  # one evaluator for the whole suite
    assert out["states"] == {"done": 2}
    assert [p["key"] for p in out["problems"]] == ["1_tanh_small", "2_tanh_medium"]
    for p in out["problems"]:
        assert p["designs"] >= 1 and p["device_s"] > 0 and p["queries"] == 0 and p["policy"] == "recipes"
        assert p["correct"] == (p["valid"] > 0)
    s = out["summary"]
    assert s["problems"] == 2 and s["counted"] == 2
    assert set(s) >= {"fast_0", "fast_1", "fast_1.5", "fast_2", "geomean_measured", "geomean_clamped",
                      "geomean_compile_measured", "geomean_compile_clamped", "correct_rate", "usd_per_problem",
                      "device_s_per_problem", "queries_per_problem", "wall_s_per_problem",
                      "evaluations_per_gpu_hour", "evaluations_per_device_hour"}
    assert all(p["evaluations"] >= p["designs"] and p["wall_s"] > 0 for p in out["problems"])
    assert s["evaluations_per_gpu_hour"] > 0 and s["evaluations_per_device_hour"] > 0
    assert "PIKE" in out["labels"]["geomean_clamped"] and "left out" in out["labels"]["geomean_measured"]
    m = read_manifest(out_dir)
    assert m.jobs == 2 and m.config["search"]["iterations"] == 1 and m.source == str(tiny_suite.resolve())
    assert all((out_dir / e.run_dir / RunStore.DB_NAME).exists() for e in m.problems)
    # the suite's files stay where they are: nothing copied into the suite directory but runs
    assert sorted(p.name for p in out_dir.iterdir()) == ["runs", "suite.json"]
    # the report reads the suite directory
    assert main(["report", "--suite", str(out_dir)]) == 0
    page = (out_dir / "report-suite.html").read_text()
    assert "1_tanh_small" in page and "fast_1.5" in page and "clamped at 1x as PIKE reports it" in page
    # and the table form
    from stratagem.cli.bench import print_results
    from stratagem.cli.common import wide_console

    print_results(wide_console(), False, out_dir)
    text = capsys.readouterr().out
    assert "2_tanh_medium" in text and "correctness rate" in text


def test_resume_after_a_kill_between_problems_redoes_nothing(tiny_suite, fast_toml, tmp_path, capsys):
    out_dir = tmp_path / "suite"

    class Killed(BaseException):
        pass

    def kill_after_first(entry, _manifest):  # type: ignore[no-untyped-def]
        if entry.state == "done":
            raise Killed  # as a kill between problems: the second never starts

    from stratagem.config import load_config

    cfg = load_config(fast_toml)
    suite_mod.new_suite(out_dir, tiny_suite, find_problems(tiny_suite), cfg, jobs=1)
    with pytest.raises(Killed):
        asyncio.run(suite_mod.run_suite(out_dir, on_change=kill_after_first))
    m = read_manifest(out_dir)
    # the second never ran: still pending, or cancelled as it started (asyncio.run cancels what is left)
    assert m.problems[0].state == "done" and m.problems[1].state in ("pending", "interrupted")
    assert len(m.sessions) == 1 and m.problems[0].active_s > 0
    first_active = m.problems[0].active_s
    first = out_dir / m.problems[0].run_dir
    with RunStore.read(first) as store:
        evaluations_before = len(store.evaluations())
    stamp = (first / RunStore.DB_NAME).stat().st_mtime_ns

    assert main(["bench", "--resume", str(out_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["states"] == {"done": 2}
    with RunStore.read(first) as store:
        assert len(store.evaluations()) == evaluations_before
    assert (first / RunStore.DB_NAME).stat().st_mtime_ns == stamp  # the finished problem was not opened
    m = read_manifest(out_dir)  # the resumption is a session of its own; the done problem's time unchanged
    assert len(m.sessions) == 2 and m.sessions[1][0] >= m.sessions[0][1]
    assert m.problems[0].active_s == first_active and m.problems[1].active_s > 0

    # a problem left unfinished (killed mid-run) continues through the run's own resume
    m = read_manifest(out_dir)
    second = m.problems[1]
    with RunStore.open(out_dir / second.run_dir) as store:
        store.set_run_status("interrupted", "killed")
        n_evals = len(store.evaluations())
    write_manifest(out_dir, m.with_entry(type(second)(**{**second.__dict__, "state": "running"})))
    assert main(["bench", "--resume", str(out_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["states"] == {"done": 2}
    with RunStore.read(out_dir / second.run_dir) as store:
        run = store.run()
        assert run is not None and run.status == "finished"
        assert len(store.evaluations()) == n_evals  # its one iteration was done: nothing measured again
    with RunStore.read(first) as store:
        assert len(store.evaluations()) == evaluations_before


def test_bench_usage_errors(tiny_suite, fast_toml, tmp_path, capsys):
    assert main(["bench"]) == 2
    assert main(["bench", str(tiny_suite), "--resume", str(tmp_path)]) == 2
    assert main(["bench", "--resume", str(tmp_path / "nothing")]) == 2
    assert "not a suite directory" in capsys.readouterr().out
    assert main(["bench", str(tmp_path / "missing"), "--run-dir", str(tmp_path / "s")]) == 2
    assert main(["bench", str(tiny_suite), "--levels", "1", "--run-dir", str(tmp_path / "s")]) == 2
    assert main(["bench", str(tiny_suite), "--policy", "auto", "--run-dir", str(tmp_path / "s")]) == 2
    assert main(["bench", str(tiny_suite), "--jobs", "0", "--run-dir", str(tmp_path / "s")]) == 2
    assert main(["bench", str(tiny_suite), "--integrity", "bogus", "--run-dir", str(tmp_path / "s")]) == 2
    assert "pytorch.integrity (--integrity)" in capsys.readouterr().out
    assert not (tmp_path / "s").exists()  # a refused suite leaves nothing behind
    # a suite directory that exists is continued with --resume, never started over
    (tmp_path / "s2").mkdir()
    shutil.copy(tiny_suite / "1_tanh_small.py", tmp_path / "one.py")
    from stratagem.config import load_config

    suite_mod.new_suite(tmp_path / "s2", tmp_path / "one.py", find_problems(tmp_path / "one.py"),
                        load_config(fast_toml))
    assert main(["bench", str(tiny_suite), "--run-dir", str(tmp_path / "s2")]) == 2
    assert "--resume" in capsys.readouterr().out


def test_a_command_problem_is_skipped_without_a_model(tmp_path, fast_toml, capsys):
    """The default without a model is the problem's domain's own (PyTorch: recipes); the
    command domain has none, so its problem is skipped, saying what it needs."""
    folder = tmp_path / "mixed"
    shutil.copytree(ROOT / "examples/command/window_sums", folder / "window_sums")
    code = main(["bench", str(folder), "--config", str(fast_toml), "--run-dir", str(tmp_path / "s"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["states"] == {"skipped": 1}
    note = out["problems"][0]["note"]
    assert "command problem" in note and "without a model" in note and out["summary"]["counted"] == 0


# -- the aggregate maths -------------------------------------------------------------------------


def _row(key: str, speedup: float | None, compile_: float | None = None, *, correct: bool | None = None,
         state: str = "done", usd: float = 0.0, device_s: float = 0.0, queries: int = 0) -> ProblemRow:
    return ProblemRow(None, key, "recipes", speedup, None, None, "-", bool(speedup and speedup > 1), queries, usd,
                      key=key, state=state, second=compile_, domain="pytorch",
                      correct=speedup is not None if correct is None else correct, device_s=device_s)


def test_fast_p_and_both_geometric_means_on_synthetic_rows() -> None:
    rows = [_row("a", 4.0, 2.0, usd=1.0, device_s=10, queries=4), _row("b", 0.5, 0.25, usd=3.0, device_s=30),
            _row("c", 1.5, None), _row("d", None, correct=True),  # valid but unranked (unstable timing)
            _row("e", None, correct=False), _row("p", None, state="pending"), _row("s", None, state="skipped")]
    counted = rows[:5]
    assert fast_p(counted, 0.0) == 3 / 5 and fast_p(counted, 1.0) == 2 / 5 and fast_p(counted, 1.5) == 1 / 5
    assert fast_p(counted, 2.0) == 1 / 5 and fast_p(counted, 1.0, "compile") == 1 / 5
    s = summary(rows)
    assert s["problems"] == 7 and s["counted"] == 5  # pending and skipped are left out
    assert s["fast_0"] == 3 / 5 and s["fast_1.5"] == 1 / 5 and s["fast_1_compile"] == 1 / 5
    assert s["correct_rate"] == 4 / 5
    # unclamped over eager: 4.0, 0.5, 1.5 (d and e left out, counted)
    assert math.isclose(s["geomean_measured"] or 0, (4.0 * 0.5 * 1.5) ** (1 / 3))
    assert s["geomean_excluded"] == 2
    # clamped as PIKE: 4.0, 1.0 (slowdown), 1.5, 1.0, 1.0 (no valid design)
    assert math.isclose(s["geomean_clamped"] or 0, (4.0 * 1.5) ** (1 / 5))
    # over compile: 2.0 and 0.25 measured; c (a design, no compile figure) left out of both
    assert math.isclose(s["geomean_compile_measured"] or 0, (2.0 * 0.25) ** 0.5) and s["geomean_compile_excluded"] == 3
    assert math.isclose(s["geomean_compile_clamped"] or 0, 2.0 ** (1 / 4))  # 2.0, 1.0, 1.0 (d), 1.0 (e)
    assert s["usd_per_problem"] == 4.0 / 5 and s["device_s_per_problem"] == 8.0 and s["queries_per_problem"] == 0.8


def test_throughput_counts_the_suites_wall_once_per_gpu() -> None:
    """Evaluations per GPU-hour: overlapping runs share the wall; two GPUs double the hours."""
    import dataclasses

    a = dataclasses.replace(_row("a", 1.0, device_s=900), evaluations=6, span=(0.0, 1800.0), slots=frozenset({"h/cuda:0"}))
    b = dataclasses.replace(_row("b", 1.0, device_s=900), evaluations=6, span=(900.0, 3600.0), slots=frozenset({"h/cuda:0"}))
    s = summary([a, b])
    assert s["evaluations_per_gpu_hour"] == 12.0  # 12 evaluations over one hour (0-3600 s), one GPU
    assert s["evaluations_per_device_hour"] == 24.0 and s["wall_s_per_problem"] == (1800 + 2700) / 2
    b2 = dataclasses.replace(b, slots=frozenset({"h/cuda:1"}))
    assert summary([a, b2])["evaluations_per_gpu_hour"] == 6.0
    assert union_s([(0, 10), (5, 20), (30, 40), (32, 35)]) == 30
    # a suite's rows: its sessions are the wall (not the night between them), each problem's active time its own
    sessions = ((0.0, 1000.0), (90000.0, 91000.0))
    a3 = dataclasses.replace(a, active_s=600.0, sessions=sessions)
    b3 = dataclasses.replace(b, active_s=1400.0, sessions=sessions, span=(0.0, 91000.0))
    s3 = summary([a3, b3])
    assert s3["wall_s_per_problem"] == 1000.0 and s3["evaluations_per_gpu_hour"] == 12 * 3600 / 2000
    # a problem run before the suite kept sessions: its evaluations are not spread over the
    # sessions' wall (seen on the H200: 425 per GPU-hour where the timed problems made 148)
    old = dataclasses.replace(a, evaluations=30, active_s=None, sessions=sessions, untimed=True)
    s4 = summary([a3, b3, old])
    assert s4["evaluations_per_gpu_hour"] == 12 * 3600 / 2000 and s4["wall_s_per_problem"] == 1000.0
    assert s4["untimed_problems"] == 1 and s4["evaluations_per_device_hour"] == 42 * 3600 / 2700


def test_summaries_of_nothing_are_empty_not_errors() -> None:
    s = summary([_row("p", None, state="pending")])
    assert s["counted"] == 0 and s["geomean_measured"] is None and s["geomean_clamped"] is None
    assert s["fast_1"] == 0.0 and s["usd_per_problem"] is None and s["evaluations_per_gpu_hour"] is None


def test_a_suite_no_queue_worker_serves_stops_its_problems_as_interrupted_exit_75(tiny_suite, fast_toml, tmp_path,
                                                                                    capsys):
    """With the queue executor and `--queue-wait`, a suite no worker serves says where its queue
    stands, marks its problems `interrupted` (so `bench --resume` continues them), and exits 75
    with the command that does."""
    out_dir, q = tmp_path / "suite", tmp_path / "fq"
    code = main(["bench", str(tiny_suite), "--config", str(fast_toml), "--jobs", "2", "--run-dir", str(out_dir),
                 "--queue", str(q), "--queue-wait", "0.5"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 75, out
    states = {p.key: (p.state, p.stop_reason or "") for p in read_manifest(out_dir).problems}
    assert {s for s, _ in states.values()} == {"interrupted"}, states
    assert all(r.startswith(suite_mod.QUEUE_STALLED) for _, r in states.values())
    assert "2 problems wait for a queue worker" in out and f"stratagem bench --resume {out_dir}" in out
