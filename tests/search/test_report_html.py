"""`stratagem report` on synthetic runs: one self-contained HTML file (no external resources,
figures embedded) with every section, a suite report with fast_p and geometric means, and the
live server's page and version."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedPolicy, src

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.report.html import build_report
from stratagem.report.serve import serve_in_background
from stratagem.report.suite import build_suite, fast_p, rows_of, summary
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

PROBLEM = Path(__file__).resolve().parents[1] / "fixtures/problem_relu.py"


class Planned(ScriptedPolicy):
    """The scripted policy, with a plan strategy per iteration and lineage."""


def fake_run(run_dir: Path, script: list[list[str]] | None = None) -> Path:
    cfg = load_config(None, {"search": {"iterations": len(script or [1, 2, 3]), "patience": 10}})
    problem = load_problem(PROBLEM)
    with RunStore.open(run_dir) as store:
        store.add_problem(problem)
        store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
        policy = ScriptedPolicy(script or [[src("a", 0.8), src("b", invalid="nan")], [src("c", 0.5)],
                                           [src("d", 0.25), src("e", 0.9)]])
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), policy)).run())  # type: ignore[arg-type]
    return run_dir


def test_the_report_is_one_self_contained_page_with_every_section(tmp_path):
    page = build_report(fake_run(tmp_path / "r"))
    for section in ("Summary", "Leaderboard", "Best so far", "Every design", "Strategies",
                    "Failures and integrity rejections", "The best design", "Lineage", "Analyses",
                    "Alignment with Bayesian optimization", "Code clusters"):
        assert f">{section}<" in page, section
    assert "4.00x [3.96, 4.04]" in page  # the best, paired, as show gives it
    assert "Diff against the reference" in page and "Fraction of speed-of-light" in page
    assert "correctness" in page and "nan" in page  # the failure and its reason
    imgs = re.findall(r'src="([^"]+)"', page)
    assert len(imgs) >= 4 and all(i.startswith("data:image/png;base64,") for i in imgs)
    assert not re.search(r'(href|src)="(https?:)?//', page)  # nothing fetched from outside
    assert "<script" not in page  # the offline file does not poll


def test_the_report_command_writes_the_file(tmp_path, capsys):
    run = fake_run(tmp_path / "r")
    out = tmp_path / "rep.html"
    assert main(["report", str(run), "--out", str(out), "--xi", "0.1,1"]) == 0
    assert out.read_text().startswith("<!doctype html>")
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert main(["report", str(run), "--xi", "fast"]) == 2


def test_the_suite_report_has_fast_p_and_both_geometric_means(tmp_path):
    a = fake_run(tmp_path / "a", [[src("a", 0.5)]])  # 2.0x
    b = fake_run(tmp_path / "b", [[src("b", 2.0)]])  # 0.5x: a slowdown
    c = fake_run(tmp_path / "c", [[src("c", invalid="wrong")]])  # nothing valid
    rows = rows_of([a, b, c])
    # the headline's ratios: the confirmation round's (1.995x, 0.49875x), as every view says them
    assert [r.speedup for r in rows][:2] == pytest.approx([2.0, 0.5], rel=0.01) and rows[2].speedup is None
    assert fast_p(rows, 0.0) == 2 / 3 and fast_p(rows, 1.0) == 1 / 3 and fast_p(rows, 2.0) == 0.0
    s = summary(rows)
    assert s["geomean_measured"] == pytest.approx(1.0, rel=0.01)  # sqrt(2.0 * 0.5)
    assert s["geomean_clamped"] == pytest.approx(2 ** (1 / 3), rel=0.01)  # 2.0, 1.0 (clamped), 1.0 (none)
    page = build_suite([a, b, c])
    assert "fast_1 (correct and &gt; 1x eager)" in page and "33%" in page and "PIKE" in page
    assert main(["report", "--suite", str(a), str(b), "--out", str(tmp_path / "s.html")]) == 0


def test_the_live_server_serves_the_page_and_its_version(tmp_path):
    run = fake_run(tmp_path / "r")
    server = serve_in_background(run, port=0)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        page = urllib.request.urlopen(base + "/").read().decode()
        assert "<script" in page and "version" in page and "5 designs" in page
        v1 = urllib.request.urlopen(base + "/version").read().decode()
        with RunStore.open(run) as store:
            store.set_run_status("running")
        v2 = urllib.request.urlopen(base + "/version").read().decode()
        assert v1 != v2
    finally:
        server.shutdown()


def test_the_live_server_waits_for_a_run_that_has_not_started(tmp_path):
    server = serve_in_background(tmp_path / "not-yet", port=0)
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/").read().decode()
        assert "waiting for the run to start" in page
    finally:
        server.shutdown()
