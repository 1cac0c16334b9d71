"""Owns rendering the agents' prompts from the templates a domain supplies.

Each role has one Markdown template, split into named sections by lines `<!-- section: NAME -->`;
a section is a `string.Template` (`$name` placeholders, `$$` for a dollar sign). Every role has
an `instructions` section (the system prompt) and, except the summarizer's pieces, a `prompt`
section (the user message). The problem's domain supplies the templates that speak of its
programs (`Domain.prompts.template(name)`: the roles, `design` and `pike`, with the words the
views use, such as what a design is timed against); the domain-free ones (`summarizer`,
`budget`) are this package's data in `context/prompts/`. All prose lives in the templates: this
module only fills them from typed inputs, and names no domain's concepts. The template
machinery is `context/templates.py`; how one design is shown, `context/designs.py`.

Templates are read on first use (never at import) and cached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from string import Template
from typing import Any, Literal

from stratagem.config import SearchConfig
from stratagem.context.curate import Curated, Group, compress_report
from stratagem.context.designs import (
    design_summary,
    lineage,
    render_design,
    render_designs,
    second_baseline_line,
    standing_words,
    timing_lines,
)
from stratagem.context.run_view import InFlight, run_so_far
from stratagem.context.templates import (
    GENERIC,
    ROLES,
    SHORT_ID_CHARS,
    fill,
    has,
    reference_word,
    sections,
    short_id,
)
from stratagem.core.search import (
    DesignView,
    Feedback,
    Plan,
    Remaining,
    SearchState,
)

__all__ = [  # the template machinery and the design views live beside this module; callers import them here too
    "GENERIC", "ROLES", "SHORT_ID_CHARS", "design_summary", "fill", "has", "reference_word", "render_design",
    "render_designs", "second_baseline_line", "sections", "short_id", "standing_words", "timing_lines",
]

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
    correctness: str = "fixed"
    """The correctness mode in force (`fixed`: the tolerances; `calibrated`: measured against a
    float64 anchor, so the tolerances above are not what decides)."""
    rules: tuple[str, ...] = ()
    """Every rule the harness enforces, one line each (`SearchState.rules`, from the domain's
    tables): every prompt of a role that plans or writes code states them."""
    domain: str = field(kw_only=True)
    """The problem's domain: whose templates the prompts are filled from."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """The rest of what the domain tells the agents (`SearchState.facts`), each a `$fact_NAME`
    placeholder of its templates (a list as one `- item` line each)."""
    budget: str = ""
    """The run's budget as a prompt says it (`render_budget`, with a policy's own lines: PIKE's
    fix reservation); PIKE's prompts state it after the problem statement, empty: not shown."""

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
            correctness=state.correctness_mode,
            rules=tuple(state.rules),
            domain=state.problem.domain,
            facts=dict(state.facts),
        )

    def values(self) -> dict[str, str]:
        return {
            "problem_name": self.name,
            "problem_source": self.source.strip(),
            "device": self.device,
            "environment": environment_text(self.device, self.environment, self.domain),
            "integrity": self.integrity,
            "reference_ms": _timings(self.reference_ms),
            "tolerances": _tolerances(self.tolerances, self.correctness),
            "rules": rules_text(self),
            "numbers": fill("design", "numbers", domain=self.domain),
            **{f"fact_{k}": fact_text(v) for k, v in self.facts.items()},
        }


def fact_text(value: Any) -> str:
    """A domain's fact as a template value: text as it is, a list one `- item` line each."""
    if isinstance(value, list | tuple):
        return "\n".join(f"- {x}" for x in value) or "(none)"  # pyright: ignore[reportUnknownVariableType]
    return str(value).strip() or "(none)"


def rules_text(problem: ProblemBrief) -> str:
    """The rules block every prompt of a role that plans or writes code carries: each rule the
    harness enforces, generated from the tables the checks run from (the domain's)."""
    if not problem.rules:
        return fill("design", "rules_none", domain=problem.domain, integrity=problem.integrity)
    return fill("design", "rules", domain=problem.domain, rules="\n".join(f"- {r}" for r in problem.rules))


def _labelled(env: Mapping[str, Any], section: str, domain: str) -> list[str]:
    """The facts of `env` the domain names in `design.md`'s `section` (`key: text with $value`
    lines, in that order), each as its text; facts it does not name are left out."""
    out = []
    table = sections("design", domain).get(section)
    for line in table.template.strip().splitlines() if table is not None else []:
        key, _, text = line.partition(":")
        value = env.get(key.strip())
        if value:
            shown = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)  # pyright: ignore[reportUnknownArgumentType]
            out.append(Template(text.strip()).safe_substitute(value=shown))
    return out


def environment_text(device: str, env: Mapping[str, Any], domain: str) -> str:
    """The environment block every prompt carries: the device and what runs there, and the
    versions the code is built against, from what the harness measured (`Evaluation.environment`),
    named as the domain's `design.md` names them (`software`, `cpu_details`)."""
    name = env.get("device_name")
    ver = ", ".join(_labelled(env, "software", domain))
    if device.startswith("cuda") or env.get("capability"):
        gpu = f"GPU {name}" if name else f"GPU ({device})"
        bits = [f"compute capability {env['capability']}" if env.get("capability") else "",
                f"{env['memory_gb']} GB" if env.get("memory_gb") else ""]
        head = f"Device: {gpu}" + (f" ({', '.join(b for b in bits if b)})" if any(bits) else "") + "."
        guide = fill("design", "gpu_guidance", domain=domain)
    else:
        bits = _labelled(env, "cpu_details", domain)
        head = f"Device: CPU {name or ''}".rstrip() + (f" ({'; '.join(b for b in bits if b)})" if any(bits) else "") + "."
        guide = fill("design", "cpu_guidance", domain=domain)
    if not env:
        head += " (its details are measured with the first evaluation)"
    if env.get("problem_dtype"):
        head += f" The problem's output dtype: {env['problem_dtype']}."
    return "\n".join(x for x in (head, f"Software: {ver}." if ver else "", guide) if x)


def _timings(ref: Mapping[str, float | None]) -> str:
    if not ref:
        return "not measured yet"
    return ", ".join(f"{k} {v:.4g}" if v is not None else f"{k} n/a" for k, v in ref.items())


def _tolerances(tol: Mapping[str, Mapping[str, float]], mode: str = "fixed") -> str:
    if mode == "calibrated":
        return "none fixed: the `calibrated` correctness rule below measures the admitted error"
    if not tol:
        return "the harness defaults"
    return "; ".join(
        f"{dtype}: " + ", ".join(f"{k}={v:g}" for k, v in sorted(t.items()))
        for dtype, t in sorted(tol.items())
    )


def instructions(role: str, *, domain: str | None, **values: object) -> str:
    """The system prompt of a role (`strategist` needs `analyst=True/False`; the domain-free
    `summarizer` takes `domain=None`). `profile=True` (the Strategist's and the Analyst's):
    the harness's `profile` tool is theirs, said in the domain's `profile_available` section
    where its template has one. `docs=True` (the Analyst's, the reviewer's and, for the Analyst
    it asks, the Strategist's): the problem has documentation to search, said in the
    `docs_available` section; without it no prompt names `search_docs`."""
    profile = bool(values.pop("profile", False))
    docs = bool(values.pop("docs", False))

    def note(on: bool, section: str) -> str:
        return fill(role, section, domain=domain) if on and domain is not None and has(role, section, domain) else ""

    profile_note, docs_note = note(profile, "profile_available"), note(docs, "docs_available")
    if role == "analyst":
        values["tool_notes"] = "\n\n".join(t for t in (docs_note, profile_note) if t)
    if role == "review":
        values["docs_note"] = docs_note
    if role == "strategist":  # its tools in one place: the Analyst, `profile`, or none
        analyst = bool(values.pop("analyst", False))
        which = "analyst_available" if analyst else "" if profile_note else "analyst_unavailable"
        told = fill("strategist", which, domain=domain, docs_note=docs_note).strip() if which else ""
        values["analyst_note"] = "\n\n".join(t for t in (told, profile_note) if t)
    if role == "summarizer":
        values.setdefault("max_words", 600)
    return fill(role, "instructions", domain=domain, **values)


@dataclass(frozen=True)
class BudgetLine:
    """One limited budget: its limit and what is left of it."""

    name: Literal["queries", "tokens", "money", "evaluation time", "wall time"]
    limit: float
    left: float
    """Net of queries reserved by phases in flight (`Remaining`)."""
    in_flight: int = 0
    """Queries being asked at this moment, the prompt's own among them (not yet in `left`)."""

    @property
    def used(self) -> float:
        return max(0.0, self.limit - self.left)

    def text(self, step_name: str = "iteration") -> str:
        """`queries: 2 of 12 used before this batch, 4 asked at once now (this one among them), 6
        left after them`."""
        if self.in_flight:
            return (f"{self.name}: {self.amount(self.used)} of {self.amount(self.limit)} used before this {step_name}, "
                    f"{self.in_flight} asked at once now (this one among them), "
                    f"{self.amount(max(0.0, self.left - self.in_flight))} left after them")
        return f"{self.name}: {self.amount(self.used)} of {self.amount(self.limit)} used, {self.amount(self.left)} left"

    def amount(self, x: float) -> str:
        if self.name == "money":
            return f"${x:.2f}"
        if self.name in ("evaluation time", "wall time"):
            return f"{x / 60:.1f} min" if self.limit >= 120 else f"{x:.0f} s"
        return f"{x:,.0f}"


@dataclass(frozen=True)
class BudgetBrief:
    """What a prompt says about the run's budget: the step (iteration, phase) it is in, and
    every limited budget with what has been spent and what is left. Build it with `of`."""

    step: int
    """This iteration (or phase), from 1."""
    steps: int | None = None
    """The run's last step (None: the budgets alone end the run)."""
    step_name: str = "iteration"
    lines: tuple[BudgetLine, ...] = ()
    patience: int | None = None
    """The run stops after this many steps in a row without a new best (None: never)."""

    @classmethod
    def of(cls, search: SearchConfig, remaining: Remaining, step: int, *, steps: int | None = None,
           step_name: str = "iteration", patience: int | None = None, in_flight: int = 0) -> BudgetBrief:
        """From the run's limits (`SearchConfig`) and `Session.budget_remaining()`; `steps`
        defaults to the configured iterations, `patience` to none (the caller knows whether its
        loop applies it); `in_flight`: the queries asked at once with this prompt's."""
        pairs = (("queries", search.max_queries, remaining.queries), ("tokens", search.max_tokens, remaining.tokens),
                 ("money", search.max_usd, remaining.usd),
                 ("evaluation time", search.max_gpu_seconds, remaining.gpu_seconds),
                 ("wall time", search.max_wall_seconds, remaining.wall_seconds))
        lines = tuple(BudgetLine(name, float(limit), float(left if left is not None else limit),  # type: ignore[arg-type]
                                 in_flight if name == "queries" else 0)
                      for name, limit, left in pairs if limit is not None)
        return cls(step, search.iterations if steps is None else steps, step_name, lines, patience)

    def last(self) -> tuple[bool, str] | None:
        """(certain, why) when this step is the last one, else None: certain at the step limit;
        probable when a budget left holds less than two steps' spend at the rate so far (wall
        time excepted: a resumed run's clock counts only this invocation)."""
        if self.steps is not None and self.step >= self.steps:
            return True, f"the run ends after {self.step_name} {self.steps}"
        done = self.step - 1
        for b in self.lines:
            if b.name != "wall time" and done > 0 and b.used > 0 and b.left < 2 * b.used / done:
                return False, (f"{b.amount(b.left)} of {b.name} left, less than two {self.step_name}s' spend at "
                               "the rate so far")
        return None


def render_budget(budget: BudgetBrief | None) -> str:
    """The budget block of a prompt: the step, each limited budget (spent, limit, left, the
    spend per finished step) and, on the last step, that it is the last."""
    if budget is None:
        return fill("budget", "budget_unknown", domain=None)
    b = budget
    head = (f"This is {b.step_name} {b.step} of {b.steps}." if b.steps is not None
            else f"This is {b.step_name} {b.step}; the budgets below end the run.")
    done = b.step - 1
    lines = []
    for x in b.lines:
        rate = (f", about {x.amount(x.used / done)} per {b.step_name}" if done > 0 and x.name != "wall time" else "")
        lines.append(f"- {x.text(b.step_name)}{rate}")
    limited = {x.name for x in b.lines}
    free = [n for n in ("queries", "tokens", "money", "evaluation time", "wall time") if n not in limited]
    if free:
        lines.append(f"- no limit on {', '.join(free)}")
    if b.patience is not None:
        lines.append(f"- the run also stops after {b.patience} {b.step_name}s in a row without a new best design")
    end = b.last()
    last = fill("budget", "budget_last" if end[0] else "budget_likely_last", domain=None, step_name=b.step_name,
                why=end[1]) if end else ""
    return "\n".join([head, *lines, *([last] if last else [])])


GROUP_TITLES: dict[Group, str] = {"best": "Best", "worst": "Worst", "recent": "Most recent", "failed": "Failed"}


def render_recent(curated: Curated, domain: str) -> str:
    """The most recent section: the newest designs, newest first; one shown in full in another
    section is named here with its numbers and where it is, so the section is what it says."""
    if not curated.newest:
        return fill("design", "empty", domain=domain)
    where = {i: g for g, ids in curated.ids_by_group().items() for i in ids}
    out = []
    for design_id in curated.newest:
        view = curated.find(design_id)
        if view is None:
            continue
        if where.get(design_id) == "recent":
            out.append(render_design(view, domain=domain))
        else:
            it = f"iteration {view.iteration}, " if view.iteration is not None else ""
            out.append(fill("design", "elsewhere", domain=domain, short_id=short_id(view.id),
                            summary=it + design_summary(view, domain),
                            group=GROUP_TITLES[where[design_id]]))  # pyright: ignore[reportArgumentType]
    return "\n\n".join(out)


def render_strategist(problem: ProblemBrief, curated: Curated, *, iteration: int, implementors: int = 1,
                      budget: BudgetBrief | None = None) -> str:
    """The Strategist's prompt: the problem and its rules, the budget, the curated designs by
    section (best, worst, most recent, failed)."""
    shown = len(curated.designs)
    summary = (
        f"{len(curated.best)} best, {len(curated.worst)} worst, {len(curated.recent)} most recent, "
        f"{len(curated.failed)} failed ({shown} in all)"
    )
    budget_note = ""
    if curated.dropped_ids or curated.truncated_ids:
        budget_note = (
            f" To fit the context, {len(curated.truncated_ids)} sources were shortened and "
            f"{len(curated.dropped_ids)} designs left out."
        )
    d = problem.domain
    return fill(
        "strategist",
        "prompt",
        domain=d,
        iteration=iteration,
        implementors=implementors,
        total=curated.total,
        shown_summary=summary,
        budget_note=budget_note,
        budget=render_budget(budget),
        best=render_designs(curated.best, domain=d),
        recent=render_recent(curated, d),
        failed=render_designs(curated.failed, domain=d),
        worst=render_designs(curated.worst, domain=d),
        **{**problem.values(), "numbers": fill("design", "numbers", domain=d) if curated.designs else ""},
    )


def fallback_variants(n: int, domain: str) -> tuple[str, ...]:
    """Distinct variants for the fallback plan's Implementors (at most `n`)."""
    text = fill("strategist", "fallback_variants", domain=domain)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return tuple(lines[:n])


def fallback_plan_text(kind: str, reason: str, domain: str) -> tuple[str, str]:
    """(rationale, instructions) of the default plan used when the Strategist fails."""
    if kind not in ("innovate", "refine"):
        raise ValueError(f"no fallback plan for {kind!r}")
    rationale = fill("strategist", f"fallback_{kind}", domain=domain, reason=reason)
    return rationale, fill("strategist", f"fallback_{kind}_instructions", domain=domain)


def render_analyst(question: str, designs: Sequence[DesignView], *, docs: str, domain: str) -> str:
    """The Analyst's prompt: the Strategist's question, the designs it can read and the
    documentation it can search (`docs`: its files in words; empty: none, and nothing is said)."""
    listing = "\n".join(
        f"- `{short_id(d.id)}`: {design_summary(d, domain)} {lineage(d)}".rstrip()
        for d in designs
    ) or "(none yet)"
    files = fill("analyst", "docs_files", domain=domain, files=docs) if docs else ""
    return fill("analyst", "prompt", domain=domain, question=question.strip(), designs=listing, docs=files,
                numbers=fill("design", "numbers", domain=domain))


def render_implementor(
    problem: ProblemBrief,
    plan: Plan,
    evidence: Sequence[DesignView],
    *,
    worker: str,
    max_attempts: int,
    report_chars: int = 1_200,
    variant: str = "",
    designs: Sequence[DesignView] = (),
    in_flight: Sequence[InFlight] = (),
) -> str:
    """An Implementor's first message: the plan (its shared part and this Implementor's own
    variant), the problem, the designs it builds on, and the whole run's best and newest
    results (`run_view.run_so_far`, from `designs`: the run's, since the first design the plan
    builds on), with the other Implementors of the iteration in flight (`in_flight`)."""
    d = problem.domain
    by_id = {v.id: v for v in designs}
    start = next((by_id[i] for i in plan.evidence if i in by_id), None)
    return fill(
        "implementor",
        "prompt",
        domain=d,
        worker=worker,
        variant=fill("implementor", "variant", domain=d, variant=variant.strip()) if variant.strip() else "",
        strategy=plan.strategy,
        rationale=plan.rationale.strip() or "(none given)",
        instructions=plan.instructions.strip() or "(none given)",
        evidence=render_designs(evidence, report_chars=report_chars, domain=d),
        run_so_far=run_so_far(designs, start, d, shown=[v.id for v in evidence], in_flight=in_flight),
        max_attempts=max_attempts,
        **{**problem.values(), "numbers": fill("design", "numbers", domain=d) if evidence else ""},
    )


def render_implementor_feedback(
    feedback: Feedback, *, attempt: int, max_attempts: int, report_chars: int = 4_000, domain: str,
    news: str = "",
) -> str:
    """The message that sends an evaluation's failures back into an Implementor's conversation,
    with `news` (`run_view.news`: what the other writers measured since it began) after it."""
    text = _implementor_feedback(feedback, attempt=attempt, max_attempts=max_attempts, report_chars=report_chars,
                                 domain=domain)
    return f"{text}\n\n{news}" if news else text


def _implementor_feedback(
    feedback: Feedback, *, attempt: int, max_attempts: int, report_chars: int, domain: str
) -> str:
    left = max_attempts - attempt
    remaining = (
        f"You have {left} evaluation{'s' if left != 1 else ''} left."
        if left > 0
        else "This is your last chance."
    )
    if feedback.duplicate_of is not None:
        perf = f" ({feedback.speedup:.3g}x vs {reference_word(domain)})" if feedback.speedup is not None else ""
        return fill("implementor_feedback", "duplicate", domain=domain, attempt=attempt, max_attempts=max_attempts,
                    short_id=short_id(feedback.duplicate_of), status=feedback.status, performance=perf,
                    remaining=remaining)
    return fill(
        "implementor_feedback",
        "prompt",
        domain=domain,
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
        domain=problem.domain,
        short_id=short_id(design.id),
        measured=design_summary(design, problem.domain),
        best_note=best_note,
        source=design.source.strip(),
        **problem.values(),
    )


def render_summarizer(transcript: str) -> str:
    """The Summarizer's prompt: the transcript to compress."""
    return fill("summarizer", "prompt", domain=None, transcript=transcript.strip())


def summary_message(summary: str) -> str:
    """The user message that stands in for the compressed part of a conversation."""
    return fill("summarizer", "summary", domain=None, summary=summary.strip())


def summary_acknowledgement() -> str:
    """The assistant reply that follows the summary message (keeps turns alternating)."""
    return fill("summarizer", "acknowledgement", domain=None)

