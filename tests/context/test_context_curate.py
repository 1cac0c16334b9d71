"""Context curation: P best, Q worst, R recent, F failed; disjoint; budget; compression; seeds."""

from __future__ import annotations

import random

from stratagem.config import ContextConfig
from stratagem.context.curate import (
    compress_report,
    curate,
    estimate_tokens,
    truncate_source,
)
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, SearchState

PROBLEM = Problem(name="p", domain="pytorch", source="class Model:\n    pass\n")


def valid(i: int, runtime_ms: float, size: int = 100) -> DesignView:
    return DesignView(f"v{i:02d}" + "0" * 61, f"# valid {i}\n" + "x" * size, "valid", i,
                      runtime_ms=runtime_ms, speedup=10 / runtime_ms, created_at=float(i))


def failed(i: int, status: str = "invalid", size: int = 100) -> DesignView:
    return DesignView(f"f{i:02d}" + "0" * 61, f"# failed {i}\n" + "y" * size, status, i,
                      report=f"[correctness] wrong: case {i}", created_at=float(i))


def run_state(designs: list[DesignView]) -> SearchState:
    return SearchState(problem=PROBLEM, designs=tuple(sorted(designs, key=lambda d: d.created_at)),
                       iteration=5)


def mixed() -> list[DesignView]:
    # runtimes: v01 is the slowest ... v10 the fastest; failures interleaved in time
    vs = [valid(i, runtime_ms=20.0 - i) for i in range(1, 11)]
    fs = [failed(i + 10, "invalid" if i % 3 else "error") for i in range(1, 7)]
    fs.append(failed(17, "flagged"))
    return vs + fs


def test_groups_counts_and_disjointness() -> None:
    cfg = ContextConfig(best=3, worst=2, recent=2, failed=2)
    c = curate(run_state(mixed()), cfg, random.Random(1))
    assert [d.id[:3] for d in c.best] == ["v10", "v09", "v08"]
    assert [d.id[:3] for d in c.worst] == ["v01", "v02"]
    assert [d.id[:3] for d in c.recent] == ["f17", "f16"]  # newest first
    assert len(c.failed) == 2
    assert all(d.status in ("invalid", "error", "flagged") for d in c.failed)
    ids = [d.id for d in c.designs]
    assert len(ids) == len(set(ids)) == 9  # disjoint
    assert not set(d.id for d in c.failed) & set(d.id for d in c.recent)
    assert c.total == 17 and not c.dropped_ids and not c.truncated_ids
    assert set(c.ids_by_group()) == {"best", "worst", "recent", "failed"}


def test_a_best_design_is_not_repeated_as_recent() -> None:
    # the newest design is also the fastest: it is shown once, as a best
    designs = [valid(1, 5.0), valid(2, 4.0), valid(3, 1.0)]
    c = curate(run_state(designs), ContextConfig(best=1, worst=0, recent=2, failed=0),
               random.Random(0))
    assert [d.id[:3] for d in c.best] == ["v03"]
    assert [d.id[:3] for d in c.recent] == ["v02", "v01"]


def test_small_runs_fill_what_they_can_and_the_best_do_not_empty_the_recent() -> None:
    # two valid designs and P=3: only the faster half is shown as best, the other as recent
    c = curate(run_state([valid(1, 2.0), valid(2, 1.0)]),
               ContextConfig(best=3, worst=2, recent=2, failed=2), random.Random(0))
    assert [d.id[:3] for d in c.best] == ["v02"] and [d.id[:3] for d in c.recent] == ["v01"]
    assert not c.worst and not c.failed
    # with more designs than P+R, recent is filled before worst, never emptied by best
    many = [valid(i, 1.0 + i) for i in range(1, 9)]
    c = curate(run_state(many), ContextConfig(best=5, worst=5, recent=2, failed=0), random.Random(0))
    assert len(c.best) == 4 and len(c.recent) == 2 and len(c.worst) == 2
    assert not set(c.ids_by_group()["best"]) & set(c.ids_by_group()["recent"])
    empty = curate(run_state([]), ContextConfig(), random.Random(0))
    assert empty.designs == () and empty.total == 0


def test_failed_sample_is_deterministic_per_seed() -> None:
    designs = [failed(i) for i in range(1, 30)]
    cfg = ContextConfig(best=0, worst=0, recent=0, failed=3)

    def pick(seed: str) -> tuple[str, ...]:
        return tuple(d.id for d in curate(run_state(designs), cfg, random.Random(seed)).failed)

    assert pick("0:3") == pick("0:3")
    assert len({pick(f"0:{i}") for i in range(6)}) > 1


def test_token_budget_shortens_sources_then_drops_low_priority() -> None:
    designs = [valid(i, 20.0 - i, size=20_000) for i in range(1, 7)] + [failed(9, size=20_000)]
    cfg = ContextConfig(best=3, worst=1, recent=1, failed=1, token_budget=6_000)
    c = curate(run_state(designs), cfg, random.Random(0))
    budget_chars = 6_000 * 4
    assert c.chars <= budget_chars
    assert c.best and c.best[0].id.startswith("v06")  # the top design always stays
    assert c.truncated_ids
    assert all(len(d.source) < 20_000 for d in c.designs)
    assert "lines cut to fit the context budget" in c.best[0].source or "cut" in c.best[0].source
    shown = {d.id for d in c.designs}
    assert shown.isdisjoint(c.dropped_ids)
    # what is dropped is the lowest priority: worst first, then failed, then recent
    assert c.dropped_ids and c.dropped_ids[-1].startswith("v01")


def test_tiny_budget_keeps_only_the_best() -> None:
    designs = [valid(i, 20.0 - i, size=50_000) for i in range(1, 5)]
    cfg = ContextConfig(best=2, worst=1, recent=1, failed=0, token_budget=500)
    c = curate(run_state(designs), cfg, random.Random(0), reserved_chars=1_200)
    assert [d.id[:3] for d in c.designs] == ["v04"]
    assert len(c.dropped_ids) == 3
    assert estimate_tokens(c.best[0].source) < 200
    roomier = curate(run_state(designs), cfg, random.Random(0), reserved_chars=0)
    assert [d.id[:3] for d in roomier.designs] == ["v04", "v03", "v02"]  # shorter, but more
    assert roomier.dropped_ids == (designs[0].id,)  # the worst goes first


def test_failure_reports_are_compressed() -> None:
    frames = "\n".join(f'  File "candidate.py", line {i}, in f{i}\n    x = y{i}' for i in range(80))
    report = (
        "[load] compile: the candidate failed to import\n"
        "Traceback (most recent call last):\n" + frames + "\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + "\n".join(f"note {i}: " + "z" * 60 for i in range(40))
        + "\n[correctness] wrong: max abs diff 1.5 at output 0"
    )
    out = compress_report(report, 1_200)
    assert len(out) <= 1_200
    lines = out.splitlines()
    assert lines[0] == "[load] compile: the candidate failed to import"
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in out
    assert "[correctness] wrong: max abs diff 1.5 at output 0" in out
    assert "line 79, in f79" in out and "line 3, in f3" not in out  # traceback cut to its end
    assert "lines cut" in out
    d = failed(1)
    d2 = curate(run_state([DesignView(d.id, d.source, "error", report=report)]),
                ContextConfig(failure_report_chars=300), random.Random(0)).designs[0]
    assert len(d2.report) <= 300 and d2.report.startswith("[load] compile")


def test_short_reports_are_unchanged() -> None:
    assert compress_report("[timing] failed: slow", 1_000) == "[timing] failed: slow"
    assert len(compress_report("x" * 5_000, 200)) <= 200


def test_truncate_source_keeps_head_and_tail() -> None:
    src = "\n".join(f"line {i}" for i in range(1_000))
    out = truncate_source(src, 800)
    assert len(out) <= 800 + 60
    assert out.startswith("line 0") and out.endswith("line 999")
    assert "lines cut" in out
