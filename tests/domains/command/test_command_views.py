"""A command run shown through `run` (its last lines), `show`, `report` and `compare` is said
in the command domain's words: "the reference", and no column, key or sentence for a baseline
the domain does not have (no PyTorch word: eager, compile, torch)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from command_fixtures import example_design
from rich.console import Console

from stratagem.cli import main
from stratagem.cli.search import _drive
from stratagem.config import load_config
from stratagem.core.design import Design
from stratagem.domains import load_problem
from stratagem.report.html import build_report
from stratagem.search.budget import Spend
from stratagem.search.export import exported_source
from stratagem.store.records import OLD_REFERENCE_KEY, EvaluationRecord
from stratagem.store.sqlite import RunStore

PYTORCH = re.compile(r"\beager\b|\bcompile\b|\btorch\b", re.IGNORECASE)
"""In text: the words (not `compiler`, nor a path)."""
IN_KEY = re.compile(r"eager|torch|compile(?!_s$)")
"""In a JSON key: any part (`speedup_compile`, `vs_eager`), but `compile_s` (the build's seconds)."""


def _timing(ratio: float) -> dict[str, object]:
    return {"name": "timing", "outcome": "passed", "reason": None, "kind": None, "duration_s": 1.0,
            "details": {"runtime": {"median_ms": 0.5}, "reference": {"median_ms": 1.0},
                        "speedup": {"ratio": ratio, "low": ratio - 0.1, "high": ratio + 0.1}}}


KEY = "reference"
"""The command domain's key for its reference in the records (`BaselineNames.key`)."""


def command_run(run_dir: Path, problem_dir: Path, key: str = KEY) -> str:
    """A finished command run with one valid design (2x over the reference) and one wrong one,
    its reference stored under `key`; the valid design's id."""
    problem = load_problem(problem_dir)
    cfg = load_config(None, {"search": {"iterations": 1}})
    with RunStore.open(run_dir) as s:
        s.add_problem(problem)
        s.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
        made = {}
        for kind, status in (("fast", "valid"), ("wrong", "invalid")):
            d = s.add_design(problem.id, Design(files=dict(example_design(kind)),
                                                provenance={"iteration": 1, "author": "implementor-1",
                                                            "strategy": "innovate"}))
            valid = status == "valid"
            s.add_evaluation(EvaluationRecord(
                design_id=d.id, problem_id=problem.id, status=status, device="cpu",
                runtime_ms=0.5 if valid else None, speedup=2.0 if valid else None,
                validators=[_timing(2.0)] if valid else [
                    {"name": "correctness", "outcome": "failed", "reason": "out.txt differs", "kind": "wrong_output",
                     "duration_s": 0.1, "details": {}}],
                environment={"device": "cpu"}, seeds=[1], reference_ms={key: 1.0} if valid else {},
                created_at=time.time(),
                speedups={key: {"ratio": 2.0, "low": 1.9, "high": 2.1, "pairs": 12, "chained": False}}
                if valid else {},
                stability={"verdict": "stable"}))
            made[kind] = d.id
        s.set_run_status("finished", "iterations")
    return made["fast"]


def _no_pytorch_word(text: str) -> None:
    found = [text[max(0, m.start() - 60):m.end() + 60] for m in PYTORCH.finditer(text)]
    assert not found, "PyTorch words in a command run's view:\n" + "\n".join(found)


@pytest.mark.parametrize("stored", [KEY, OLD_REFERENCE_KEY])
def test_show_and_show_json_of_a_command_run_name_no_pytorch_baseline(small_problem, tmp_path, capsys, stored):
    """In the domain's own words, and a database written before the key was the domain's
    (`eager` for every domain) reads the same."""
    run_dir = tmp_path / "run"
    best = command_run(run_dir, small_problem, stored)
    assert main(["show", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "vs the reference [95% CI]" in text and best[:10] in text and "2.00x" in text
    assert "vs - " not in text
    _no_pytorch_word(text)
    assert main(["show", str(run_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["domain"] == "command" and out["best"]["id"] == best and out["best"]["speedup"] == 2.0
    assert out["reference_ms"] == {KEY: 1.0}
    assert out["best"]["speedup_ci"] == [1.9, 2.1]
    assert not [k for k in _keys(out) if IN_KEY.search(k)]


def test_compare_and_report_of_command_runs_name_no_pytorch_baseline(small_problem, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    command_run(a, small_problem)
    command_run(b, small_problem)
    png = tmp_path / "cmp.png"
    assert main(["compare", str(a), str(b), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "2.00x" in text
    _no_pytorch_word(text)
    assert main(["compare", str(a), str(b), "--plot", str(png), "--json"]) == 0
    assert not [k for k in _keys(json.loads(capsys.readouterr().out)) if IN_KEY.search(k)]
    page = build_report(a, analyses=False)
    assert "vs the reference [95% CI]" in page
    diff = page.split("Diff against the reference", 1)[1]  # against the reference's files, not the problem's bundle
    assert "stratagem-command/1" not in diff and "every window summed from scratch" in diff
    # the stored configuration is shown as stored (`compile_timeout_s` is the build's limit)
    _no_pytorch_word(re.sub(r"<script.*?</script>|<style.*?</style>|<details><summary>configuration.*?</details>",
                            "", page, flags=re.S))


def _keys(x: object) -> list[str]:
    if isinstance(x, dict):
        return [str(k) for k in x] + [k for v in x.values() for k in _keys(v)]
    if isinstance(x, list):
        return [k for v in x for k in _keys(v)]
    return []


def test_the_last_lines_of_a_command_run_name_no_pytorch_baseline(small_problem, tmp_path):
    run_dir = tmp_path / "run"
    best = command_run(run_dir, small_problem)
    with RunStore.read(run_dir) as store:
        from stratagem.search.state import stored_views

        view = next(v for v in stored_views(store) if v.id == best)
    outcome = SimpleNamespace(best=view, top=view, run_dir=run_dir, stop_reason="iterations", iterations=1,
                              no_gain=None, best_path=run_dir / "best", reference_ms={KEY: 1.0},
                              spend=Spend(), headline=None)

    async def start(_view: object) -> SimpleNamespace:
        return outcome

    console = Console(width=160, record=True)
    _drive(console, False, start, run_dir, "command")
    text = console.export_text()
    assert "vs the reference (paired, 95% interval)" in text and "2.00x" in text
    _no_pytorch_word(text.replace(str(tmp_path), ""))
    # the export header (`export`, and the run's best/ folder): the reference in its own words
    header = exported_source(view, "window_sums_small", run_dir, "cpu", {KEY: 1.0}, "command", "kernel.c")
    header = header.split("\n\n", 1)[0]
    assert "speedup vs the reference (paired, 95% interval): 2.00x" in header and "the reference 1.0000 ms" in header
    _no_pytorch_word(header.replace(str(tmp_path), ""))


def test_every_view_of_a_command_run_tells_the_same_headline(small_problem, tmp_path, capsys):
    """Issue 43's agreement, on a command run: the headline `show` prints, `show --json`, the
    export header and `best/`, the HTML report, the suite row, `compare` and the MCP tool."""
    from stratagem.mcp.harness import run_entry
    from stratagem.report.compare import compare_runs
    from stratagem.report.suite import rows_of
    from stratagem.search.api import show_run

    run_dir = tmp_path / "run"
    best = command_run(run_dir, small_problem)
    head = show_run(run_dir).headline
    assert head.top is not None and head.top.id == best and head.ratios is not None and not head.confirmed
    ref_text = head.ratios.reference.number()
    assert main(["show", str(run_dir)]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert all(" ".join(line.split()) in flat for line in head.lines())
    assert main(["show", str(run_dir), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["headline"]["design"] == best == j["best"]["id"] and j["headline"]["vs"]["reference"]["text"] == ref_text
    out = tmp_path / "kernel.c"  # a design of one file: that file, headed in C's comment syntax
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    header = out.read_text().split("\n\n")[0]
    assert best in header and ref_text in header and all(ln.startswith("// ") for ln in header.splitlines())
    page = build_report(run_dir, analyses=False)
    assert head.lines()[0] in page and ">Confirmation round<" not in page
    row = rows_of([run_dir])[0]
    assert row.best_id == best and row.speedup == head.ratios.reference.ratio
    curve = compare_runs([run_dir]).curves[0]
    assert curve.best is not None and curve.best.id == best
    entry = run_entry(run_dir)
    assert entry.best_speedup == head.ratios.reference.ratio and entry.best_confirmed is False


def test_the_mcp_server_exports_a_command_design_as_export_does(small_problem, tmp_path, capsys):
    """The MCP tool and `stratagem export` give the same file: the problem's main file (its
    first editable file, `kernel.c`), headed in C's comment syntax, not a file of the first
    domain's name headed by `#`."""
    from stratagem.mcp.harness import export_design

    run_dir = tmp_path / "run"
    best = command_run(run_dir, small_problem)
    text = export_design(str(run_dir), best, None).text
    assert text.startswith("// stratagem") and "int main" not in text.split("\n", 1)[0]
    (tmp_path / "out").mkdir()
    assert main(["export", str(run_dir), best, "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["kernel.c"]
    cli = (tmp_path / "out" / "kernel.c").read_text()
    assert cli.split("// exported")[0] == text.split("// exported")[0]
