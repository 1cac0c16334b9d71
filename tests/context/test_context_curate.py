"""Context curation: P best, Q worst, R recent, F failed; disjoint; budget; compression; seeds."""

from __future__ import annotations

import random
from dataclasses import replace

from stratagem.config import ContextConfig
from stratagem.context.curate import (
    CHARS_PER_TOKEN,
    compress_report,
    curate,
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


def ids(views) -> list[str]:
    return [d.id[:3] for d in views]


def test_the_newest_design_is_a_best_and_the_recent_section_names_it() -> None:
    # the newest design is also the fastest: shown in full once, as a best, and named first in
    # the most recent section, which then shows the next newest (issue 24: "most recent" listed
    # the first iteration's designs while the newest were under "best", unsaid)
    designs = [valid(1, 5.0), valid(2, 4.0), valid(3, 1.0)]
    c = curate(run_state(designs), ContextConfig(best=1, worst=0, recent=2, failed=0), random.Random(0))
    assert ids(c.best) == ["v03"]
    assert ids(c.recent) == ["v02", "v01"]
    assert [i[:3] for i in c.newest] == ["v03", "v02", "v01"]


def test_a_slow_design_is_a_worst_not_swallowed_by_the_recent_section() -> None:
    # issue 24: "0 worst" was shown while a design slower than eager existed; the recent section
    # had taken it. Worst is chosen before recent now.
    designs = [valid(1, 2.0), valid(2, 12.0), valid(3, 1.0)]  # v02 slower than eager (10/12)
    c = curate(run_state(designs), ContextConfig(best=3, worst=2, recent=2, failed=2), random.Random(0))
    assert ids(c.best) == ["v03", "v01"]  # the better half (of 3: 2)
    assert ids(c.worst) == ["v02"]
    assert c.recent == () and [i[:3] for i in c.newest] == ["v03", "v02", "v01"]  # all named, none new
    assert c.worst[0].speedup is not None and c.worst[0].speedup < 1


def test_worst_takes_the_lowest_valid_then_the_oldest_failures() -> None:
    designs = [valid(1, 1.0), failed(2), valid(3, 2.0), failed(4, "error"), failed(5), valid(6, 4.0)]
    cfg = ContextConfig(best=1, worst=4, recent=1, failed=1)
    c = curate(run_state(designs), cfg, random.Random(0))
    assert ids(c.best) == ["v01"]
    assert ids(c.worst) == ["v06", "v03", "f02", "f04"]  # lowest ratio first, then failures, oldest first
    assert ids(c.recent) == ["f05"] and [i[:3] for i in c.newest] == ["v06", "f05"]
    assert c.failed == ()  # no failure left to draw


def test_unstable_designs_are_valid_and_rank_among_the_worst() -> None:
    shaky = DesignView("u07" + "0" * 61, "# shaky", "unstable", 7, runtime_ms=20.0, speedup=0.5,
                       speedup_low=0.2, speedup_high=1.4, created_at=7.0)
    designs = [valid(1, 1.0), valid(2, 2.0), shaky, failed(8)]
    c = curate(run_state(designs), ContextConfig(best=1, worst=1, recent=1, failed=1), random.Random(0))
    assert ids(c.best) == ["v01"] and ids(c.worst) == ["u07"]  # not ranked, but valid and the slowest
    assert ids(c.recent) == ["f08"] and ids(c.failed) == []


def test_every_section_on_a_known_store() -> None:
    # ten valid designs (v01 slowest ... v10 fastest, created in that order), seven failures
    # after them: each section's contents are known
    c = curate(run_state(mixed()), ContextConfig(best=3, worst=2, recent=3, failed=2), random.Random(7))
    assert ids(c.best) == ["v10", "v09", "v08"]
    assert ids(c.worst) == ["v01", "v02"]
    assert ids(c.recent) == ["f17", "f16", "f15"] and [i[:3] for i in c.newest] == ["f17", "f16", "f15"]
    assert len(c.failed) == 2 and {d.id[:3] for d in c.failed} <= {"f11", "f12", "f13", "f14"}
    shown = [d.id for d in c.designs]
    assert len(shown) == len(set(shown)) == 10  # one section each
    # a run whose newest designs are the best: the recent section names them, then shows older ones
    late = [valid(i, 20.0 - i) for i in range(1, 6)] + [failed(6)] + [valid(i, 1.0 / i) for i in range(7, 9)]
    c = curate(run_state(late), ContextConfig(best=2, worst=1, recent=2, failed=1), random.Random(0))
    assert ids(c.best) == ["v08", "v07"] and ids(c.worst) == ["v01"]
    assert [i[:3] for i in c.newest] == ["v08", "v07", "f06", "v05"] and ids(c.recent) == ["f06", "v05"]
    empty = curate(run_state([]), ContextConfig(), random.Random(0))
    assert empty.designs == () and empty.total == 0 and empty.newest == ()


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
    assert len(c.best[0].source) < 200 * CHARS_PER_TOKEN  # under 200 tokens
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


def test_truncate_source_keeps_the_new_part_whole_and_cuts_what_the_parent_had() -> None:
    parent = [f"line {i}" for i in range(1_000)]
    new = [f"new kernel line {i}" for i in range(5)]
    child = "\n".join(parent[:10] + new + parent[10:])
    out = truncate_source(child, 800, ["\n".join(parent)])
    assert len(out) <= 800
    assert all(line in out.splitlines() for line in new)
    assert "line 9" in out and "line 10" in out.splitlines()  # beside the new part
    assert "line 999" not in out and "lines as in its parent" in out  # the farthest cut first
    assert truncate_source(child, 800).endswith("line 999")  # no parent: head and tail


def test_over_budget_the_best_and_the_newest_stay_whole_and_the_old_weak_one_is_shortened() -> None:
    # the observed case: the newest relevant design cut in its middle while an iteration-1
    # design at 1.12x was shown in full
    def long(i: int, runtime_ms: float, lines: int) -> DesignView:
        v = valid(i, runtime_ms)
        body = "".join(f"    y{n} = kernel_{i}_{n}(x)  # step {n} of design {i}\n" for n in range(lines))
        return replace(v, source=f"class ModelNew:\n{body}")

    old_weak = long(1, 1.0 / 1.12, 120)
    middling = [long(i, 1.0 / 1.3, 120) for i in (2, 3)]
    best = long(4, 1.0 / 1.6, 200)
    newest = long(5, 1.0 / 1.4, 200)
    state = run_state([old_weak, *middling, best, newest])
    whole = sum(len(d.source) for d in (best, newest))
    cfg = ContextConfig(best=1, worst=1, recent=2, failed=0, token_budget=(whole + 6_000) // 4)
    cur = curate(state, cfg, random.Random(0), reserved_chars=0)
    shown = {d.id: d for d in cur.designs}
    assert shown[best.id].source == best.source and shown[newest.id].source == newest.source
    assert old_weak.id not in shown or len(shown[old_weak.id].source) < len(old_weak.source)
    assert old_weak.id in cur.truncated_ids + cur.dropped_ids
