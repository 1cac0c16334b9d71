"""A design the machine was too busy to time (issue 41): valid, not measured, never a ratio,
not ranked, and said in the same words by every view and to the agents."""

from __future__ import annotations

from stratagem.context.designs import render_design
from stratagem.core.search import ranked
from stratagem.search import numbers
from stratagem.search.state import design_views
from stratagem.store.records import DesignRecord, EvaluationRecord

WHY = ("not measured: the machine was busy (the timing thread waited for a CPU 48% of the time "
       "(limit 5%)); 3 of 40 timed in quiet windows, after 30.1 s of waiting (limit: timing.busy.wait_s = 30.0)")


def _views():
    designs = [DesignRecord(id=i, problem_id="p", files={"candidate.py": i}, created_at=n)
               for n, i in enumerate(("busy1", "fast1"))]
    evs = [
        EvaluationRecord(design_id="busy1", problem_id="p", status="valid", device="cpu", runtime_ms=2.0, speedup=None,
                         validators=[], environment={}, seeds=[1], reference_ms={}, created_at=0.0,
                         stability={"verdict": "busy", "reasons": [WHY], "notes": []}),
        EvaluationRecord(design_id="fast1", problem_id="p", status="valid", device="cpu", runtime_ms=1.0, speedup=1.4,
                         validators=[], environment={}, seeds=[1], reference_ms={}, created_at=1.0,
                         speedups={"eager": {"ratio": 1.4, "low": 1.35, "high": 1.45}},
                         stability={"verdict": "stable", "reasons": [], "notes": []}),
    ]
    return design_views(designs, evs, [], lambda d: "class ModelNew: pass\n", domain="pytorch")


def test_a_busy_design_is_valid_but_has_no_ratio_and_is_not_ranked() -> None:
    views = {v.id: v for v in _views()}
    busy = views["busy1"]
    assert busy.status == "busy" and busy.speedup is None and busy.runtime_ms is None
    assert [v.id for v in ranked(list(views.values()))] == ["fast1"]
    assert numbers.passed(busy) and numbers.not_ranked_because(busy) == WHY
    c = numbers.counts(list(views.values()))
    assert (c.valid, c.ranked, c.busy) == (2, 1, 1)
    assert "1 not measured (the machine was busy)" in c.text()


def test_the_agents_are_told_the_same_words() -> None:
    text = render_design({v.id: v for v in _views()}["busy1"], domain="pytorch")
    assert WHY in text and "1.4" not in text
