"""One story for users (issue 43): a run's headline is built once (`search/headline.py`) and every
view says it the same way: the run's last lines, `show` and `show --json`, `export` (and `best/`),
the HTML report, `compare`, the suite rows and the MCP tools. A design is never shown against
itself; exports are the design's own files; fast_p needs the interval above p; a missing extra
says how to install it and exits 2."""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

import pytest
from fakes import ScriptedPolicy, src
from test_report_html import fake_run

from stratagem.cli import main
from stratagem.core.design import files_text
from stratagem.core.search import DesignView
from stratagem.domains import names_of
from stratagem.mcp.harness import run_entry
from stratagem.report.compare import compare_runs, table
from stratagem.report.html import build_report
from stratagem.report.suite import ProblemRow, fast_p, rows_of
from stratagem.search.api import show_run
from stratagem.search.export import exported_files, provenance_lines, write_files
from stratagem.search.headline import ratios_of
from stratagem.store.records import OLD_REFERENCE_KEY

PT = names_of("pytorch")
ROOT = Path(__file__).resolve().parents[2]


def _runs(tmp_path: Path) -> dict[str, Path]:
    """A confirmed run (the loop's round, the fake evaluator's blocks) and an unconfirmed one."""
    import asyncio

    from test_loop import make_loop

    confirmed = fake_run(tmp_path / "confirmed", [[src("a", 0.5), src("b", 0.6)]])
    loop, store, _ = make_loop(tmp_path / "plain", ScriptedPolicy([[src("c", 0.4), src("d", 0.8)]]),
                               iterations=1, confirm_top=0)
    asyncio.run(loop.run())
    store.close()
    return {"confirmed": confirmed, "unconfirmed": store.run_dir}


@pytest.mark.parametrize("shape", ["confirmed", "unconfirmed"])
def test_every_view_tells_the_same_headline(tmp_path: Path, capsys, shape: str) -> None:
    run = _runs(tmp_path)[shape]
    head = show_run(run).headline
    assert head.top is not None and head.ratios is not None and head.confirmed == (shape == "confirmed")
    best_id, ref_text = head.top.id, head.ratios.reference.number()
    # show: the headline's lines, the leaderboard's first row with the same ratio
    assert main(["show", str(run)]) == 0
    shown = capsys.readouterr().out
    flat = " ".join(shown.split())
    for line in head.lines():
        assert " ".join(line.split()) in flat
    # show --json: the same design and text
    assert main(["show", str(run), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["headline"]["design"] == best_id == j["best"]["id"]
    assert j["headline"]["vs"]["reference"]["text"] == ref_text and j["headline"]["confirmed"] == head.confirmed
    # export (and best/): the same ratio in the header
    assert main(["export", str(run)]) == 0
    header = capsys.readouterr().out.split("\n\n")[0]
    assert best_id in header and ref_text in header
    assert ref_text in (run / "best" / "candidate.py").read_text()
    # the HTML report: the headline first, the confirmation round when there is one
    page = build_report(run, analyses=False)
    assert html.escape(head.lines()[0]) in page
    assert (">Confirmation round<" in page) == head.confirmed
    if head.confirmed:  # the round before the leaderboard, its search-time figure beside it
        assert page.index(">Confirmation round<") < page.index(">Leaderboard<")
        assert html.escape(head.ratios.search.number()) in page
    # the suite row, compare and the MCP tool: the same design and ratio
    row = rows_of([run])[0]
    assert row.best_id == best_id and row.speedup == head.ratios.reference.ratio
    cmp = compare_runs([run])
    assert cmp.curves[0].best is not None and cmp.curves[0].best.id == best_id
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(table(cmp))
    assert head.ratios.reference.cell() in console.export_text()
    entry = run_entry(run)
    assert entry.best_speedup == head.ratios.reference.ratio and entry.best_confirmed == head.confirmed


def test_a_leaderboard_in_the_rounds_order_shows_the_rounds_ratios(tmp_path: Path, capsys) -> None:
    run = _runs(tmp_path)["confirmed"]
    views = show_run(run).views
    from stratagem.core.search import ranked

    order = ranked(views)
    shown = [ratios_of(v, PT).reference for v in order]
    confirmed = [a.ratio for a in shown if a.confirmed]
    assert confirmed == sorted(confirmed, reverse=True)  # the order agrees with the numbers shown
    assert main(["show", str(run)]) == 0
    board = capsys.readouterr().out
    for a in shown:
        assert a.cell().split(" [")[0] in board
    # show --json: each entry's `speedup` is the figure the table shows (the round's, where it
    # timed the design; the search-time one beside it in `confirmed.search`)
    assert main(["show", str(run), "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["leaderboard"]
    assert [e["id"] for e in entries] == [v.id for v in order]
    assert any(a.confirmed for a in shown)
    for e, v, a in zip(entries, order, shown, strict=True):
        assert e["speedup"] == a.ratio and e["speedup_ci"] == [a.low, a.high]
        if a.confirmed:
            assert e["confirmed"]["search"]["ratio"] == v.speedup != a.ratio


def _compile_design() -> DesignView:
    """Plain torch.compile of the reference (the `compile` recipe): the torch.compile baseline itself."""
    return DesignView(id="c" * 64, source="class ModelNew: ...\n", status="valid", author="recipe:compile",
                      runtime_ms=1.0, speedup=3.5, speedup_low=3.3, speedup_high=3.6, speedup_compared=0.83,
                      compared_low=0.66, compared_high=1.15, compared_unstable="spread")


def test_a_design_is_never_shown_against_itself(tmp_path: Path) -> None:
    v = _compile_design()
    r = ratios_of(v, PT)
    assert r.compared is not None and r.compared.itself and r.compared.verdict == "itself"
    assert r.compared.number() == "itself" and "0.83" not in r.compared.cell()
    header = "\n".join(provenance_lines(v, "p", tmp_path, "cpu", names=PT))
    assert "torch.compile itself" in header
    assert "faster than torch.compile" not in header and "unknown" not in header and "0.83" not in header
    # the confirmation round's table (the run's last lines, `show`, `confirm`): the round timed the
    # design beside the baseline (two compiles of one program), and its cell still says `itself`
    from rich.console import Console

    from stratagem.cli.confirm import confirmed_table

    r99 = {"ratio": 0.99, "low": 0.97, "high": 1.01, "pairs": 3}
    body = {"blocks": 3, "designs": [{"design_id": v.id, "rank": 1, "vs_eager": {**r99, "ratio": 3.4},
                                      "vs_compile": r99, "warm": None, "search": None}]}
    console = Console(width=200, record=True)
    console.print(confirmed_table(body, PT, [v]))
    row = console.export_text().splitlines()[-2]
    assert "itself" in row and "0.99" not in row


def test_a_command_design_exports_as_its_own_files(tmp_path: Path) -> None:
    v = DesignView(id="d" * 64, source=files_text({"main.c": "int main(void) { return 0; }\n",
                                                   "Makefile": "all:\n\tcc main.c\n", "sizes.json": "{}\n"}),
                   status="valid", speedup=2.0, speedup_low=1.9, speedup_high=2.1)
    files = exported_files(v, "window_sums", tmp_path, "cpu", {OLD_REFERENCE_KEY: 17.7}, "command", "main.c")
    assert files["main.c"].startswith("// stratagem ") and "int main(void)" in files["main.c"]
    assert files["Makefile"] == "all:\n\tcc main.c\n" and files["sizes.json"] == "{}\n"
    assert "baseline: the reference 17.7000 ms" in files["main.c"]  # never "reference: the reference"
    written = write_files(files, tmp_path / "out")
    assert sorted(p.name for p in written) == ["Makefile", "main.c", "sizes.json"]
    data_only = exported_files(DesignView(id="e" * 64, source="1 2 3\n", status="valid"), "p", tmp_path, None,
                               reference_ms=None, domain="command", main="data.txt")
    assert "PROVENANCE.txt" in data_only and data_only["data.txt"] == "1 2 3\n"


def _row(speedup: float, low: float, high: float) -> ProblemRow:
    return ProblemRow(None, "p", "recipes", speedup, low, high, "-", low > 1.0, 0, 0.0, second=speedup,
                      second_low=low, second_high=high, correct=True, domain="pytorch")


def test_fast_p_counts_only_gains_beyond_their_interval() -> None:
    no_gain = _row(1.6, 0.9, 2.4)  # nothing beat the baseline by more than its interval
    gain = _row(1.6, 1.55, 1.65)
    assert fast_p([no_gain], 1.0) == 0.0 and fast_p([no_gain], 1.0, "compile") == 0.0
    assert fast_p([no_gain], 0.0) == 1.0  # correct, at least
    assert fast_p([gain], 1.5) == 1.0 and fast_p([gain], 1.5, "compile") == 1.0 and fast_p([gain], 2.0) == 0.0


def test_a_missing_extra_names_its_pip_command_and_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # importing it raises ImportError
    problem = ROOT / "examples" / "command" / "blocked_scan"
    code = main(["run", str(problem), "--policy", "tune", "--design", str(problem / "designs" / "template"),
                 "--run-dir", str(tmp_path / "r"), "--device", "cpu"])
    said = capsys.readouterr()
    err = said.out + said.err
    assert code == 2 and "pip install 'stratagem[tune]'" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
    from stratagem.errors import MissingExtra, import_extra

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingExtra, match=r"pip install 'stratagem\[ray\]'"):
        import_extra("ray", "ray", "--executor ray")


def test_a_suite_row_gives_the_best_designs_verdicts_under_the_benchmarks_rules() -> None:
    """bench and report --suite say, per problem, whether the best design passes KernelBench's
    and PIKE's own rules (issue 42), read from its latest evaluation's correctness details."""
    from types import SimpleNamespace

    from stratagem.report.suite import _rules_of

    details = {"benchmarks": {"kernelbench": {"ok": False, "trials": 5}, "pike": {"ok": True, "trials": 5}}}
    evs = [SimpleNamespace(design_id="b", validators=[{"name": "correctness", "details": details}]),
           SimpleNamespace(design_id="a", validators=[{"name": "correctness", "details": {}}])]
    assert _rules_of(evs, "b") == (("kernelbench", False), ("pike", True))
    assert _rules_of(evs, "a") == () and _rules_of(evs, None) == ()


def test_the_headline_says_which_correctness_rule_passed_the_design_and_the_references_precision() -> None:
    """Issue 42: the verdict and `show` (every view: the headline) say at what precision the
    reference ran and which rule decided; the rule comes from the stored correctness details."""
    import dataclasses
    import time

    from stratagem.search.headline import headline_of
    from stratagem.search.state import measures_of
    from stratagem.store.records import EvaluationRecord

    rule = ("reference: 2 of 5 trials outside the fixed tolerance of eager, judged against float64 within the "
            "reference's own error (the reference ran in TF32 convolutions)")
    ev = EvaluationRecord(design_id="d" * 64, problem_id="p", status="valid", device="cuda", runtime_ms=1.0,
                          speedup=2.0, validators=[{"name": "correctness", "outcome": "passed", "details": {
                              "trials": [], "max_abs_err": 1e-3, "max_rel_err": 1e-2, "decided_by": rule}}],
                          environment={}, seeds=[1], reference_ms={}, created_at=time.time())
    v = dataclasses.replace(_compile_design(), author="implementor-1", measures=measures_of(ev, "load"))
    lines = headline_of([v], PT).lines()
    assert ("correctness decided by the reference rule: 2 of 5 trials outside the fixed tolerance of eager, judged "
            "against float64 within the reference's own error (the reference ran in TF32 convolutions)") in lines
    bare = dataclasses.replace(v, measures=measures_of(ev.model_copy(update={"validators": []}), "load"))
    assert not any("correctness" in line for line in headline_of([bare], PT).lines())  # a domain that does not say


def test_the_leaderboard_and_the_round_give_tied_designs_the_same_rank(tmp_path: Path, capsys) -> None:
    """Two designs the round cannot tell apart are `=1` in its table, so the leaderboard (`show`,
    the report) says `=1` for both too, not 1 and 2; the next one is 2 in both."""
    a = src("a", 0.5) + "# confirmed_ms=0.5\n"
    b = src("b", 0.6) + "# confirmed_ms=0.5\n"  # re-timed, b is as fast as a
    c = src("c", 0.9)
    run = fake_run(tmp_path / "r", [[a, b, c]])
    views = {v.source: v.id[:10] for v in show_run(run).views}
    assert main(["show", str(run)]) == 0
    rows = [line.split("│")[1:3] for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    marks = [(m.strip(), d.strip()) for m, d in rows if d.strip() in views.values()]
    round_table, board = marks[:3], marks[3:]  # show prints the round's table, then the leaderboard
    want = {("=1", views[a]), ("=1", views[b]), ("2", views[c])}
    assert set(round_table) == want and set(board) == want, marks
    page = build_report(run)
    for mark, design in want:
        assert page.count(f"<td>{html.escape(mark)}</td><td>{design}") == 2, (mark, design)  # round and leaderboard
