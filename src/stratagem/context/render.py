"""Owns rendering the agents' prompts from the templates kept as package data.

Each role has one Markdown file in `stratagem/context/prompts/`, split into named sections by
lines `<!-- section: NAME -->`; a section is a `string.Template` (`$name` placeholders, `$$` for
a dollar sign). Every role has an `instructions` section (the system prompt) and, except the
summarizer's pieces, a `prompt` section (the user message). All prose lives in the templates:
this module only fills them from typed inputs.

Templates are read on first use (never at import) and cached.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from string import Template
from typing import Any

from stratagem.context.curate import Curated, compress_report
from stratagem.core.search import DesignView, Feedback, Plan, SearchState

ROLES = ("strategist", "analyst", "implementor", "implementor_feedback", "review", "summarizer")
"""One template file per role (plus `design`, the block every design is shown in)."""

SHORT_ID_CHARS = 12
"""Design ids are shown by their first characters; agents may cite any unique prefix."""

_SECTION = re.compile(r"^<!-- section: ([a-z_]+) -->[ \t]*$", re.MULTILINE)


def short_id(design_id: str) -> str:
    return design_id[:SHORT_ID_CHARS]


@functools.cache
def sections(name: str) -> dict[str, Template]:
    """The named sections of `prompts/<name>.md` (read once, then cached)."""
    text = (resources.files("stratagem.context") / "prompts" / f"{name}.md").read_text("utf-8")
    parts = _SECTION.split(text)
    out: dict[str, Template] = {}
    for i in range(1, len(parts) - 1, 2):
        out[parts[i]] = Template(parts[i + 1].strip("\n"))
    return out


def fill(name: str, section: str, **values: object) -> str:
    """Fill one section of one template; a missing value is a bug and raises KeyError."""
    return sections(name)[section].substitute({k: str(v) for k, v in values.items()}).strip()


@dataclass(frozen=True)
class ProblemBrief:
    """What every prompt says about the problem."""

    name: str
    source: str
    device: str = "cpu"
    reference_ms: Mapping[str, float | None] = field(default_factory=dict)
    tolerances: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    integrity: str = "lenient"
    environment: Mapping[str, Any] = field(default_factory=dict)
    """What the harness reported about the machine (device name, versions, ISA...)."""
    dtypes: tuple[str, ...] = ()
    """The problem's input dtypes, when known."""

    @classmethod
    def from_state(cls, state: SearchState, integrity: str = "lenient") -> ProblemBrief:
        return cls(
            name=state.problem.name,
            source=state.problem.source,
            device=state.device,
            reference_ms=dict(state.reference_ms),
            tolerances=dict(state.tolerances),
            integrity=integrity,
            environment=dict(state.environment),
        )

    def values(self) -> dict[str, str]:
        return {
            "problem_name": self.name,
            "problem_source": self.source.strip(),
            "device": self.device,
            "environment": environment_text(self.device, self.environment),
            "integrity": self.integrity,
            "reference_ms": _timings(self.reference_ms),
            "tolerances": _tolerances(self.tolerances),
        }


def environment_text(device: str, env: Mapping[str, Any]) -> str:
    """The environment block every prompt carries: the device and what runs there, and the
    versions the code is built against, from what the harness measured (`Evaluation.environment`)."""
    name = env.get("device_name")
    versions = [f"torch {env['torch']}" if env.get("torch") else "",
                f"CUDA {env['cuda']}" if env.get("cuda") else "", f"Triton {env['triton']}" if env.get("triton") else "",
                f"Python {env['python']}" if env.get("python") else "",
                f"torch built with {env['compiler']}" if env.get("compiler") else ""]
    ver = ", ".join(v for v in versions if v)
    if device.startswith("cuda") or env.get("capability"):
        gpu = f"GPU {name}" if name else f"GPU ({device})"
        bits = [f"compute capability {env['capability']}" if env.get("capability") else "",
                f"{env['memory_gb']} GB" if env.get("memory_gb") else ""]
        head = f"Device: {gpu}" + (f" ({', '.join(b for b in bits if b)})" if any(bits) else "") + "."
        guide = fill("design", "gpu_guidance")
    else:
        bits = [f"{env['threads']} threads" if env.get("threads") else "",
                f"instruction sets {' '.join(env['isa'])}" if env.get("isa") else "",
                f"torch's CPU kernels use {env['cpu_capability']}" if env.get("cpu_capability") else ""]
        head = f"Device: CPU {name or ''}".rstrip() + (f" ({'; '.join(b for b in bits if b)})" if any(bits) else "") + "."
        guide = fill("design", "cpu_guidance")
    if not env:
        head += " (its details are measured with the first evaluation)"
    if env.get("problem_dtype"):
        head += f" The problem's output dtype: {env['problem_dtype']}."
    return "\n".join(x for x in (head, f"Software: {ver}." if ver else "", guide) if x)


def _timings(ref: Mapping[str, float | None]) -> str:
    if not ref:
        return "not measured yet"
    return ", ".join(f"{k} {v:.4g}" if v is not None else f"{k} n/a" for k, v in ref.items())


def _tolerances(tol: Mapping[str, Mapping[str, float]]) -> str:
    if not tol:
        return "the harness defaults"
    return "; ".join(
        f"{dtype}: " + ", ".join(f"{k}={v:g}" for k, v in sorted(t.items()))
        for dtype, t in sorted(tol.items())
    )


def _performance(view: DesignView) -> str:
    """The design's numbers as the leaderboard shows them: the paired speedup over eager with
    its 95% interval, over torch.compile, the absolute time, and an unstable timing's reason."""
    parts = []
    if view.speedup is not None:
        ci = " (paired, 95% interval)" if view.speedup_low is not None else ""
        parts.append(f"{view.speedup_text()} vs eager{ci}")
    if view.speedup_compile is not None:
        fails = (" (a baseline that fails the correctness check)" if view.compile_fails else
                 " (its timing unstable: the ratio carries that noise)" if view.compile_unstable else "")
        parts.append(f"{view.speedup_compile:.3g}x vs torch.compile{fails}")
    if view.runtime_ms is not None:
        parts.append(f"{view.runtime_ms:.4g} ms")
    if view.status == "unstable" and view.stability:
        parts.append(f"timing unstable: {view.stability}")
    if view.timing_notes:
        parts.append("timing notes: " + "; ".join(view.timing_notes))
    return (", " + ", ".join(parts)) if parts else ""


def _lineage(view: DesignView) -> str:
    bits = []
    if view.iteration is not None:
        bits.append(f"iteration {view.iteration}")
    if view.strategy:
        bits.append(f"strategy {view.strategy}")
    if view.author:
        bits.append(f"by {view.author}")
    if view.parents:
        bits.append("from " + ", ".join(f"`{short_id(p)}`" for p in view.parents))
    return "(" + "; ".join(bits) + ")" if bits else ""


def render_design(view: DesignView, *, report_chars: int | None = None) -> str:
    """One design as every prompt shows it: id, verdict, lineage, source, failure report."""
    report = view.report.strip()
    if report_chars is not None:
        report = compress_report(report, report_chars)
    if view.status in ("valid", "unreviewed", "unstable"):
        report_block = ""
    else:
        report_block = "Failure report:\n```\n" + report + "\n```" if report else ""
    return fill(
        "design",
        "design",
        short_id=short_id(view.id),
        status=view.status,
        performance=_performance(view),
        lineage="\n".join([_lineage(view), *(f"- {line}" for line in view.measures.lines())]).strip("\n"),
        source=view.source.strip(),
        report=report_block,
    )


def render_designs(views: Sequence[DesignView], *, report_chars: int | None = None) -> str:
    if not views:
        return fill("design", "empty")
    return "\n\n".join(render_design(v, report_chars=report_chars) for v in views)


def instructions(role: str, **values: object) -> str:
    """The system prompt of a role (`strategist` needs `analyst=True/False`)."""
    if role == "strategist":
        note = "analyst_available" if values.pop("analyst", False) else "analyst_unavailable"
        values["analyst_note"] = fill("strategist", note)
    if role == "summarizer":
        values.setdefault("max_words", 600)
    return fill(role, "instructions", **values)


def render_strategist(problem: ProblemBrief, curated: Curated, *, iteration: int, implementors: int = 1) -> str:
    """The Strategist's prompt: the problem and the curated designs, by group."""
    shown = len(curated.designs)
    summary = (
        f"{len(curated.best)} best, {len(curated.recent)} most recent, "
        f"{len(curated.failed)} failed, {len(curated.worst)} worst ({shown} in all)"
    )
    budget_note = ""
    if curated.dropped_ids or curated.truncated_ids:
        budget_note = (
            f" To fit the context, {len(curated.truncated_ids)} sources were shortened and "
            f"{len(curated.dropped_ids)} designs left out."
        )
    return fill(
        "strategist",
        "prompt",
        iteration=iteration,
        implementors=implementors,
        total=curated.total,
        shown_summary=summary,
        budget_note=budget_note,
        best=render_designs(curated.best),
        recent=render_designs(curated.recent),
        failed=render_designs(curated.failed),
        worst=render_designs(curated.worst),
        **problem.values(),
    )


def fallback_variants(n: int) -> tuple[str, ...]:
    """Distinct variants for the fallback plan's Implementors (at most `n`)."""
    lines = [line.strip() for line in fill("strategist", "fallback_variants").splitlines() if line.strip()]
    return tuple(lines[:n])


def fallback_plan_text(kind: str, reason: str) -> tuple[str, str]:
    """(rationale, instructions) of the default plan used when the Strategist fails."""
    if kind not in ("innovate", "refine"):
        raise ValueError(f"no fallback plan for {kind!r}")
    rationale = fill("strategist", f"fallback_{kind}", reason=reason)
    return rationale, fill("strategist", f"fallback_{kind}_instructions")


def render_analyst(question: str, designs: Sequence[DesignView], *, docs: str) -> str:
    """The Analyst's prompt: the Strategist's question and the designs it can read."""
    listing = "\n".join(
        f"- `{short_id(d.id)}`: {d.status}{_performance(d)} {_lineage(d)}".rstrip()
        for d in designs
    ) or "(none yet)"
    return fill("analyst", "prompt", question=question.strip(), designs=listing, docs=docs)


def render_implementor(
    problem: ProblemBrief,
    plan: Plan,
    evidence: Sequence[DesignView],
    *,
    worker: str,
    max_attempts: int,
    report_chars: int = 1_200,
    variant: str = "",
) -> str:
    """An Implementor's first message: the plan (its shared part and this Implementor's own
    variant), the problem and the designs it builds on."""
    return fill(
        "implementor",
        "prompt",
        worker=worker,
        variant=fill("implementor", "variant", variant=variant.strip()) if variant.strip() else "",
        strategy=plan.strategy,
        rationale=plan.rationale.strip() or "(none given)",
        instructions=plan.instructions.strip() or "(none given)",
        evidence=render_designs(evidence, report_chars=report_chars),
        max_attempts=max_attempts,
        **problem.values(),
    )


def render_implementor_feedback(
    feedback: Feedback, *, attempt: int, max_attempts: int, report_chars: int = 4_000
) -> str:
    """The message that sends an evaluation's failures back into an Implementor's conversation."""
    left = max_attempts - attempt
    remaining = (
        f"You have {left} evaluation{'s' if left != 1 else ''} left."
        if left > 0
        else "This is your last chance."
    )
    if feedback.duplicate_of is not None:
        perf = f" ({feedback.speedup:.3g}x vs eager)" if feedback.speedup is not None else ""
        return fill("implementor_feedback", "duplicate", attempt=attempt, max_attempts=max_attempts,
                    short_id=short_id(feedback.duplicate_of), status=feedback.status, performance=perf,
                    remaining=remaining)
    return fill(
        "implementor_feedback",
        "prompt",
        attempt=attempt,
        max_attempts=max_attempts,
        status=feedback.status,
        short_id=short_id(feedback.design_id),
        report=compress_report(feedback.report.strip(), report_chars),
        remaining=remaining,
    )


def render_review(
    problem: ProblemBrief, design: DesignView, best: DesignView | None = None
) -> str:
    """The Analyst's review prompt for a design that looks too good to be true."""
    best_note = ""
    if best is not None and best.id != design.id and best.speedup is not None:
        best_note = f" The best design so far, `{short_id(best.id)}`, reached {best.speedup_text()}."
    return fill(
        "review",
        "prompt",
        short_id=short_id(design.id),
        runtime_ms=f"{design.runtime_ms:.4g}" if design.runtime_ms is not None else "n/a",
        speedup=f"{design.speedup:.3g}" if design.speedup is not None else "n/a",
        best_note=best_note,
        source=design.source.strip(),
        **problem.values(),
    )


def render_summarizer(transcript: str) -> str:
    """The Summarizer's prompt: the transcript to compress."""
    return fill("summarizer", "prompt", transcript=transcript.strip())


def summary_message(summary: str) -> str:
    """The user message that stands in for the compressed part of a conversation."""
    return fill("summarizer", "summary", summary=summary.strip())


def summary_acknowledgement() -> str:
    """The assistant reply that follows the summary message (keeps turns alternating)."""
    return fill("summarizer", "acknowledgement")

