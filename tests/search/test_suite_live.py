"""The live view of a suite (`stratagem bench` on a terminal): counts by state, the running
problems with their device, time and best so far, the latest finished, what is left; on a
non-terminal a line per change of state."""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from stratagem.report import suite_live
from stratagem.report.suite import ProblemRow
from stratagem.search.suite_manifest import ProblemEntry, SuiteManifest


def _manifest() -> SuiteManifest:
    now = time.time()
    entries = (
        ProblemEntry("level1-1_a", "/k/1_a.py", "runs/level1-1_a", state="done", started_at=now - 300,
                     finished_at=now - 100, active_s=200.0, stop_reason="the policy has nothing more to propose"),
        ProblemEntry("level1-2_b", "/k/2_b.py", "runs/level1-2_b", state="running", started_at=now - 42,
                     device="cuda:1", active_s=100.0),
        ProblemEntry("level1-3_c", "/k/3_c.py", "runs/level1-3_c", state="failed", started_at=now - 90,
                     finished_at=now - 80, active_s=10.0, stop_reason="ProblemError: no Model"),
        *(ProblemEntry(f"level1-{i}_x", f"/k/{i}_x.py", f"runs/level1-{i}_x") for i in range(4, 9)),
    )
    return SuiteManifest(source="/k", problems=entries, config={})


def test_the_table_shows_running_finished_and_left(tmp_path, monkeypatch) -> None:
    reads: list[str] = []

    def fake_row(d: Path, key: str = "", state: str = "done", note=None) -> ProblemRow:
        reads.append(key)
        return ProblemRow(d, key, "recipes", 1.5 if key.endswith("a") else 1.1, 1.4, 1.6, "-", True, 0, 0.0, key=key)

    monkeypatch.setattr(suite_live, "row_of", fake_row)
    for e in _manifest().problems[:3]:  # only problems with a run database are read
        (tmp_path / e.run_dir).mkdir(parents=True)
        (tmp_path / e.run_dir / "run.db").write_bytes(b"")
    out = io.StringIO()
    view = suite_live.SuiteLiveView(Console(file=out, width=200, force_terminal=False), tmp_path)
    m = _manifest()
    view.changed(m.problems[1], m)
    assert out.getvalue().strip() == "[2/8] level1-2_b: running on cuda:1"  # a line on a non-terminal
    text = io.StringIO()
    Console(file=text, width=200).print(view.render())
    shown = text.getvalue()
    assert "1 done" in shown and "1 running" in shown and "1 failed" in shown and "5 pending" in shown
    assert "level1-2_b" in shown and "cuda:1" in shown and "1.10x [1.40, 1.60]" in shown
    assert "142 s" in shown or "141 s" in shown or "143 s" in shown  # its earlier sessions plus this one
    assert "1.50x" in shown and "200 s" in shown and "no Model" in shown
    assert "... 5 pending" in shown and "level1-4_x" not in shown
    Console(file=io.StringIO(), width=200).print(view.render())
    assert reads.count("level1-1_a") == 1 and reads.count("level1-2_b") == 1  # kept, not read every redraw
