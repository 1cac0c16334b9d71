"""Owns turning stored records into the search's view of a run: design views (latest verdict,
reviews applied), the best design, and how many iterations passed without a new best.

Pure functions over records; the loop reads the store and calls these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stratagem.core.confirmed import ConfirmedDesign
from stratagem.core.design import files_text
from stratagem.core.jsonish import mapping
from stratagem.core.search import MEASURED, PASSED, DesignView, Measures, ranked
from stratagem.core.text import clip
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.domains import get_domain, names_of
from stratagem.domains.base import BaselineNames
from stratagem.search.headline import Headline, headline_of
from stratagem.store.records import (
    DesignRecord,
    EvaluationRecord,
    IterationRecord,
    ReviewRecord,
    keyed,
)

if TYPE_CHECKING:
    from stratagem.store.sqlite import RunStore

ERROR_TAIL_CHARS = 4000
"""How much of the end of an error output a policy's feedback carries."""


def failure_info(ev: EvaluationRecord) -> dict[str, Any]:
    """The first failure of a stored evaluation as structured data: `validator`, `kind`,
    `error_tail` (the traceback's or the worker's stderr's end) and, for a wrong output, the
    `max_abs_err` and `max_rel_err` of the failing comparison. Empty when nothing failed."""
    failed = next((v for v in ev.validators if v.get("outcome") == "failed"), None)
    if failed is None:
        return {}
    d = mapping(failed.get("details"))
    tail = d.get("traceback") or mapping(d.get("sandbox")).get("stderr_tail") or d.get("stderr_tail") or ""
    cmp: Mapping[str, Any] = d
    trials = d.get("trials")
    if "max_abs_err" not in d and isinstance(trials, list) and trials:
        bad = [t for t in trials if isinstance(t, Mapping) and t.get("ok") is False]
        cmp = bad[-1] if bad else trials[-1] if isinstance(trials[-1], Mapping) else {}
    return {"validator": failed.get("name"), "kind": failed.get("kind"),
            "error_tail": str(tail)[-ERROR_TAIL_CHARS:],
            "max_abs_err": _num(cmp.get("max_abs_err")), "max_rel_err": _num(cmp.get("max_rel_err"))}


def report_of(ev: EvaluationRecord) -> str:
    """The agent-facing failure report of a stored evaluation."""
    return Verdict(tuple(ValidatorResult.from_json(v) for v in ev.validators)).report()


def design_views(
    designs: Sequence[DesignRecord],
    evaluations: Sequence[EvaluationRecord],
    reviews: Sequence[ReviewRecord],
    source_of: Callable[[DesignRecord], str],
    tags: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    domain: str,
) -> list[DesignView]:
    """One view per evaluated design, oldest first; the latest evaluation decides its status,
    a review that found cheating turns a valid design into `flagged`, and one whose latest
    review failed (no verdict) into `unreviewed` (its runtime kept, so it can be retried).

    The second ratio of each view is the one over the baseline the problem's `domain` sets
    beside the reference (`BaselineNames.compared`)."""
    dom = get_domain(domain)
    names, compile_stage = dom.names, dom.worker.compile_stage
    compared = names.compared
    latest: dict[str, EvaluationRecord] = {}
    for ev in evaluations:
        latest[ev.design_id] = ev
    cheats = {r.design_id: r.reason for r in reviews if r.cheating}
    last_review = {r.design_id: r for r in reviews}
    out = []
    for d in designs:
        ev = latest.get(d.id)
        if ev is None:
            continue
        prov = d.provenance
        status = ev.status
        report = report_of(ev)
        review = last_review.get(d.id)
        if d.id in cheats:
            status, report = "flagged", f"[review] judged cheating: {cheats[d.id]}"
        elif status == "valid" and review is not None and review.failed:
            status, report = "unreviewed", f"[review] not reviewed yet: {review.reason}"
        verdict = ev.stability.get("verdict")
        why = "; ".join(str(r) for r in ev.stability.get("reasons") or ()) if verdict in ("unstable", "busy") else ""
        if status == "valid" and verdict == "unstable":
            status, report = "unstable", f"[timing] unstable, not ranked until re-timed stably: {why}"
        elif status == "valid" and verdict == "busy":
            status, report = "busy", f"[timing] {why}"
        valid = status in MEASURED
        ref = keyed(ev.speedups, names.key).get(names.key) or {}
        other = (ev.speedups.get(compared) or {}) if compared else {}
        out.append(DesignView(
            id=d.id, source=source_of(d), status=status,  # type: ignore[arg-type]
            iteration=prov.get("iteration"), strategy=prov.get("strategy"), author=prov.get("author"),
            parents=tuple(d.parent_ids), runtime_ms=ev.runtime_ms if valid else None,
            speedup=ev.speedup if valid else None, report=report, created_at=d.created_at,
            speedup_low=_num(ref.get("low")) if valid else None,
            speedup_high=_num(ref.get("high")) if valid else None,
            speedup_compared=_num(other.get("ratio")) if valid else None,
            compared_low=_num(other.get("low")) if valid else None,
            compared_high=_num(other.get("high")) if valid else None,
            stability=why,
            compared_fails=str(other.get("baseline_fails") or ""),
            compared_unstable=str(other.get("baseline_unstable") or ""),
            tags=dict((tags or {}).get(d.id) or {}),
            measures=measures_of(ev, compile_stage),
            timing_notes=timing_notes_of(ev),
        ))
    return out


def design_text(store: RunStore, d: DesignRecord) -> str:
    """A stored design as the one text agents and views see (`core.design.files_text`)."""
    return files_text({name: store.get_artifact(h) for name, h in d.files.items()})


def stored_views(
    store: RunStore,
    designs: Sequence[DesignRecord] | None = None,
    evaluations: Sequence[EvaluationRecord] | None = None,
) -> list[DesignView]:
    """`design_views` of a whole run store (`show`, reports, `compare`); `designs` and
    `evaluations` when the caller has read them already."""
    problems = store.problems()
    if not problems:  # a run not started: no design yet
        return []
    domain = problems[0].domain
    views = design_views(store.designs() if designs is None else designs,
                         store.evaluations() if evaluations is None else evaluations, store.reviews(),
                         lambda d: design_text(store, d), store.tags(), domain=domain)
    return with_confirmation(views, store.confirmations(), names_of(domain))


def with_confirmation(views: Sequence[DesignView], rounds: Sequence[Mapping[str, Any]],
                      names: BaselineNames) -> list[DesignView]:
    """`views`, each design of the latest confirmation round carrying its confirmed numbers
    (stored in the words of `names`, the run's domain's)."""
    if not rounds:
        return list(views)
    by_id = {str(d.get("design_id")): ConfirmedDesign.from_json(d, names.key, names.compared)
             for d in rounds[-1].get("designs") or ()}
    out = []
    for v in views:
        c = by_id.get(v.id)
        if c is None:
            out.append(v)
        elif v.status in ("unstable", "busy") and c.vs_reference is not None:
            # re-timed in independent workers, with an interval across them: ranked on that
            was = "unstable" if v.status == "unstable" else "not measured (the machine was busy)"
            note = f"search-time timing was {was} ({clip(v.stability, 120)}); ranked on the confirmation round"
            out.append(dataclasses.replace(v, confirmed=c, status="valid", stability="",
                                           timing_notes=(*v.timing_notes, note)))
        else:
            out.append(dataclasses.replace(v, confirmed=c))
    return out


def reference_from(evaluations: Sequence[EvaluationRecord], key: str) -> dict[str, float | None]:
    """The reference's times the latest evaluation holding them recorded, the reference's entry
    under `key` (the domain's own; an older database's is renamed: `records.keyed`)."""
    ev = next((e for e in reversed(evaluations) if e.reference_ms), None)
    return keyed(ev.reference_ms, key) if ev is not None else {}


def measures_of(ev: EvaluationRecord, compile_stage: str | None) -> Measures:
    """What the agents are shown of a stored evaluation besides its verdict and speedup; its
    compile time is the duration of the domain's `compile_stage` (`WorkerSpec.compile_stage`)."""
    by = {v.get("name"): v for v in ev.validators}

    def details(name: str) -> Mapping[str, Any]:
        d = (by.get(name) or {}).get("details")
        return d if isinstance(d, Mapping) else {}

    timing = details("timing")
    run = mapping(timing.get("runtime"))
    ref = mapping(timing.get("reference"))
    corr = details("correctness")
    roof = details("roofline")
    built = by.get(compile_stage) or {}
    profile = mapping(timing.get("profile"))
    kernels = profile.get("kernels") or details("provenance").get("kernels") or ()
    failures = tuple(f"{v.get('name')} ({v.get('kind') or 'failed'}): {clip(str(v.get('reason') or ''), 300)}"
                     for v in ev.validators if v.get("outcome") == "failed")
    top = sorted(((str(k[0]), float(k[1])) for k in kernels
                  if isinstance(k, list | tuple) and len(k) == 2 and isinstance(k[1], int | float)),
                 key=lambda kt: -kt[1])[:5]
    return Measures(
        runtime_q1_ms=_num(run.get("q1_ms")), runtime_q3_ms=_num(run.get("q3_ms")),
        reference_ms=_num(ref.get("median_ms")), pairs=int(timing["pairs"]) if isinstance(timing.get("pairs"), int) else None,
        compile_s=_num(built.get("duration_s")) if built.get("outcome") == "passed" else None,
        max_abs_err=_num(corr.get("max_abs_err")) if corr else failure_info(ev).get("max_abs_err"),
        max_rel_err=_num(corr.get("max_rel_err")) if corr else failure_info(ev).get("max_rel_err"),
        failures=failures, kernels=tuple(top),
        floor_ms=_num(roof.get("floor_ms")) if roof.get("checked") else None,
        floor_fraction=_num(roof.get("sol_fraction")) if roof.get("checked") else None,
        floor_margin=_num(roof.get("margin")) if roof.get("checked") else None,
        floor_basis=str(roof["basis"]) if roof.get("checked") and roof.get("basis") else None,
        correctness_rule=str(corr["decided_by"]) if corr.get("decided_by") else None,
    )


def timing_notes_of(ev: EvaluationRecord) -> tuple[str, ...]:
    """What the timing saw that bears on trust without deciding its verdict (its stability
    notes), and a wait for the timing lock long enough to notice (waits are never charged to
    the design, but a user watching the run saw them)."""
    notes = [str(n) for n in ev.stability.get("notes") or ()]
    waited = 0.0
    for v in ev.validators:
        d = v.get("details")
        if isinstance(d, Mapping) and isinstance(d.get("lock_wait_s"), int | float):
            waited += float(d["lock_wait_s"])
    if waited >= 1.0:
        notes.append(f"waited {waited:.0f} s for the timing lock (not charged to the design)")
    return tuple(notes)


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) else None


def pending_designs(designs: Sequence[DesignRecord], evaluations: Sequence[EvaluationRecord]) -> list[DesignRecord]:
    """Designs stored but never evaluated (the run was killed while they were running)."""
    done = {ev.design_id for ev in evaluations}
    return [d for d in designs if d.id not in done]


def best_of(views: Sequence[DesignView]) -> DesignView | None:
    """The ranked design with the highest paired speedup (whether or not it beats the
    reference: `DesignView.beats_reference` says that)."""
    valid = ranked(views)
    return valid[0] if valid else None


class RunViews:
    """What every view of a stored run says of its designs, mixed into `show`'s `RunSummary`
    and the report's `RunData` (each a dataclass with `views` and `domain`): the best design,
    the headline, how the run's domain names its baselines."""

    views: list[DesignView]
    domain: str | None

    @property
    def best(self) -> DesignView | None:
        """The first ranked design (the headline's `top`), whether or not it beats the reference."""
        return best_of(self.views)

    @property
    def headline(self) -> Headline:
        """The run's result as every view says it (`search/headline.py`)."""
        return headline_of(self.views, self.names)

    @property
    def names(self) -> BaselineNames:
        """How the run's domain names its baselines."""
        return names_of(self.domain)


def stale_iterations(iterations: Sequence[IterationRecord], views: Sequence[DesignView]) -> int:
    """Trailing finished iterations that produced no new best (the patience counter)."""
    best = 0.0
    stale = 0
    by_iter: dict[int, list[DesignView]] = {}
    for v in views:
        if v.iteration is not None:
            by_iter.setdefault(int(v.iteration), []).append(v)
    for it in iterations:
        if it.status == "running":
            continue
        new = [v.speedup for v in ranked(by_iter.get(it.n, []))]
        if new and max(new) > best:  # type: ignore[type-var]
            best = float(max(new))  # type: ignore[type-var, arg-type]
            stale = 0
        else:
            stale += 1
    return stale


def strategy_counts(views: Sequence[DesignView]) -> dict[str, dict[str, int]]:
    """Strategy -> {designs, valid} (valid as every view counts it: passed and timed by the
    harness, whether or not its timing settled; `search/numbers.py`)."""
    out: dict[str, dict[str, int]] = {}
    for v in views:
        c = out.setdefault(v.strategy or "-", {"designs": 0, "valid": 0})
        c["designs"] += 1
        c["valid"] += int(v.status in PASSED)
    return out
