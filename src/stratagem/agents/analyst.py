"""Owns the Analyst: the Strategist's child agent that reads, diffs and searches docs, and the
reviewer of designs that look too good to be true.

Tools: `read_design(design_id)`, `diff_designs(a, b)` (a unified diff), `compare_designs(a, b)`
(their measurements side by side), `search_docs(query)` only where the problem has
documentation indexed (`has_docs`: a tool with nothing behind it cost a query each time an
Analyst tried it), and, when asked a question and the problem's domain offers it, the
harness's `profile` (`agents/tools.py`); no file or scratchpad tools (it
answers one question from the designs, and nothing reads a file it would write). Design ids may be given by any
unique prefix. `ask_analyst` answers one question (text); `review_design` returns a `Review`.
Failures come back as data: an unanswered question as a sentence saying why, a failed review
as a non-cheating `Review` whose reason says the review could not be made.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, Field
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.models import Model

from stratagem.agents.calls import AgentRuntime, run_agent
from stratagem.agents.docs import DocIndex, format_hits
from stratagem.agents.tools import BaseDeps, probe_toolset
from stratagem.context import render
from stratagem.context.curate import compress_report
from stratagem.core.search import DesignView, ProbeMode, Review

MIN_PREFIX = 6
MAX_DIFF_CHARS = 20_000
MAX_SOURCE_CHARS = 40_000


@dataclass
class AnalystDeps(BaseDeps):
    """The designs the Analyst may read and the documentation it may search."""

    designs: Mapping[str, DesignView] = field(default_factory=dict)
    """Full design id -> view."""
    docs: DocIndex | None = None
    domain: str = field(kw_only=True)
    """The problem's domain: whose words the designs are shown in."""


class ReviewOutput(BaseModel):
    """The Analyst's verdict on a suspiciously fast design."""

    cheating: bool = Field(description="true if the speed or the correctness is faked")
    reason: str = Field(description="the lines and the argument that decide it")


def find_design(designs: Mapping[str, DesignView], ref: str) -> DesignView | str:
    """The design `ref` names (a full id or a unique prefix), or an error message."""
    ref = ref.strip().strip("`")
    if ref in designs:
        return designs[ref]
    if len(ref) < MIN_PREFIX:
        return f"unknown design id {ref!r} (give at least {MIN_PREFIX} characters)"
    matches = [d for i, d in designs.items() if i.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        return f"unknown design id {ref!r}"
    return f"ambiguous design id {ref!r}: matches {len(matches)} designs"


def describe_design(view: DesignView, domain: str) -> str:
    """A design's full record as `read_design` shows it."""
    source = view.source
    if len(source) > MAX_SOURCE_CHARS:
        source = source[:MAX_SOURCE_CHARS] + "\n# ... [cut]"
    return render.render_design(replace(view, source=source), report_chars=4_000, domain=domain)


def diff_text(a: DesignView, b: DesignView) -> str:
    """Unified diff of two designs' sources."""
    lines = difflib.unified_diff(
        a.source.splitlines(keepends=True),
        b.source.splitlines(keepends=True),
        fromfile=render.short_id(a.id),
        tofile=render.short_id(b.id),
    )
    text = "".join(lines)
    if not text:
        return "the two designs have identical sources"
    if len(text) > MAX_DIFF_CHARS:
        text = text[:MAX_DIFF_CHARS] + f"\n... [{len(text) - MAX_DIFF_CHARS} characters cut]"
    return text


def measurement_rows(v: DesignView, domain: str) -> dict[str, str]:
    """A design's measurements by name, as `compare_designs` lines them up (the second
    baseline's row only where the domain has one)."""
    m = v.measures
    ref = render.reference_word(domain)
    second = (render.fill("design", "second_baseline", domain=domain)
              if render.has("design", "second_baseline", domain) else None)

    def num(x: float | None, unit: str = "") -> str:
        return "-" if x is None else f"{x:.4g}{unit}"

    quart = (f"{m.runtime_q1_ms:.4g}-{m.runtime_q3_ms:.4g} ms"
             if m.runtime_q1_ms is not None and m.runtime_q3_ms is not None else "-")
    return {
        "status": v.status, f"speedup vs {ref} (paired)": v.speedup_text(),
        **({f"vs {second}": v.compile_text()} if second else {}),
        "median": num(v.runtime_ms, " ms"), "quartiles": quart, f"{ref} beside it": num(m.reference_ms, " ms"),
        "stability": v.stability or ("stable" if v.speedup is not None else "-"),
        "build time": num(m.compile_s, " s"), "max abs error": num(m.max_abs_err),
        "max rel error": num(m.max_rel_err), "failures": "; ".join(m.failures) or "-",
        "top kernels": ", ".join(f"{n[:40]} {t:.3g}" for n, t in m.kernels[:3]) or "-",
    }


def compare_text(a: DesignView, b: DesignView, domain: str) -> str:
    """Two designs' measurements side by side, and the ratio of their medians."""
    ra, rb = measurement_rows(a, domain), measurement_rows(b, domain)
    ia, ib = render.short_id(a.id), render.short_id(b.id)
    lines = [f"| measurement | {ia} | {ib} |", "|---|---|---|"]
    lines += [f"| {k} | {ra[k]} | {rb[k]} |" for k in ra]
    if a.speedup and b.speedup:
        lines.append(f"\n{ib} is {b.speedup / a.speedup:.3g}x the paired speedup of {ia} (each timed beside "
                     f"{render.reference_word(domain)} in its own worker: compare the ratios, not the absolute times).")
    return "\n".join(lines)


def _on_pair(designs: Mapping[str, DesignView], a: str, b: str,
             show: Callable[[DesignView, DesignView], str]) -> str:
    """`show(a, b)` of the two designs the ids name, or the first lookup's error."""
    da, db = find_design(designs, a), find_design(designs, b)
    if isinstance(da, str):
        return da
    if isinstance(db, str):
        return db
    return show(da, db)


def has_docs(docs: DocIndex | None) -> bool:
    """Whether there is documentation to search (else no `search_docs`, and no prompt names it)."""
    return docs is not None and len(docs) > 0


def analyst_toolset() -> FunctionToolset[AnalystDeps]:
    """read_design, diff_designs and compare_designs."""
    ts: FunctionToolset[AnalystDeps] = FunctionToolset()

    @ts.tool
    def read_design(ctx: RunContext[AnalystDeps], design_id: str) -> str:
        """Show one design in full: its verdict, lineage, measurements, source and failure report.

        Args:
            design_id: the id shown, or a unique prefix of at least 6 characters.
        """
        d = find_design(ctx.deps.designs, design_id)
        return d if isinstance(d, str) else describe_design(d, ctx.deps.domain)

    @ts.tool
    def diff_designs(ctx: RunContext[AnalystDeps], a: str, b: str) -> str:
        """Show what changed from design `a` to design `b` (a unified diff of their sources).

        Args:
            a: the first design's id (or unique prefix).
            b: the second design's id (or unique prefix).
        """
        return _on_pair(ctx.deps.designs, a, b, diff_text)

    @ts.tool
    def compare_designs(ctx: RunContext[AnalystDeps], a: str, b: str) -> str:
        """Compare what the harness measured of two designs side by side: status, paired
        speedup with its interval, median and quartiles, the reference's time beside it,
        stability, build time, errors, failures and top kernels.

        Args:
            a: the first design's id (or unique prefix).
            b: the second design's id (or unique prefix).
        """
        return _on_pair(ctx.deps.designs, a, b, lambda x, y: compare_text(x, y, ctx.deps.domain))

    return ts


def docs_toolset() -> FunctionToolset[AnalystDeps]:
    """search_docs, offered only where the problem has documentation (`has_docs`)."""
    ts: FunctionToolset[AnalystDeps] = FunctionToolset()

    @ts.tool
    def search_docs(ctx: RunContext[AnalystDeps], query: str) -> str:
        """Search the problem's documentation (keyword and similarity ranking) for facts about an
        API, a device or a technique; returns the best snippets.

        Args:
            query: a few words describing what you look for.
        """
        if ctx.deps.docs is None:
            return "no documentation is available for this problem"
        return format_hits(ctx.deps.docs.search(query, k=5))

    return ts


def build_analyst(*, output_retries: int = 2, model: Model | None = None,
                  domain: str, tools: Sequence[ProbeMode] = (), docs: bool = False) -> Agent[AnalystDeps, str]:
    """A fresh Analyst that answers questions in text (told in `domain`'s words), with the
    harness's `profile` when it is among `tools` and `search_docs` when there are `docs`."""
    return Agent(
        model, output_type=str, deps_type=AnalystDeps, name="analyst",
        instructions=render.instructions("analyst", domain=domain, profile="profile" in tools, docs=docs),
        toolsets=[analyst_toolset(), *([docs_toolset()] if docs else []),
                  probe_toolset([m for m in tools if m == "profile"])],
        retries={"output": output_retries, "tools": max(output_retries, 2)},
    )


def build_reviewer(
    *, output_retries: int = 2, model: Model | None = None, domain: str, docs: bool = False
) -> Agent[AnalystDeps, ReviewOutput]:
    """A fresh Analyst that reviews one design and answers with a `ReviewOutput` (with
    `search_docs` when there are `docs`)."""
    return Agent(
        model, output_type=ReviewOutput, deps_type=AnalystDeps, name="reviewer",
        instructions=render.instructions("review", domain=domain, docs=docs),
        toolsets=[analyst_toolset(), *([docs_toolset()] if docs else [])],
        retries={"output": output_retries, "tools": max(output_retries, 2)},
    )


def docs_note(docs: DocIndex | None) -> str:
    """The documentation's files in words ('' where there is none)."""
    if docs is None or not len(docs):
        return ""
    return f"{len(docs.files)} files ({', '.join(docs.files[:8])}{', ...' if len(docs.files) > 8 else ''})"


async def ask_analyst(
    question: str,
    deps: AnalystDeps,
    runtime: AgentRuntime,
    *,
    shown: Sequence[DesignView] | None = None,
) -> str:
    """Run the Analyst on one question; its answer, or a sentence saying why there is none.

    Args:
        shown: the designs listed in the prompt (default: all it may read).
    """
    listed = list(shown) if shown is not None else list(deps.designs.values())
    prompt = render.render_analyst(question, listed, docs=docs_note(deps.docs), domain=deps.domain)
    agent = build_analyst(output_retries=runtime.cfg.output_retries, domain=deps.domain, tools=deps.probes,
                          docs=has_docs(deps.docs))
    outcome = await run_agent(agent, prompt, role="analyst", runtime=runtime, deps=deps)
    if not outcome.ok or outcome.output is None:
        return f"The Analyst could not answer ({outcome.error_kind}): {outcome.error}"
    return str(outcome.output)


async def review_design(
    design: DesignView,
    deps: AnalystDeps,
    runtime: AgentRuntime,
    *,
    problem: render.ProblemBrief,
    best: DesignView | None = None,
) -> Review:
    """The Analyst's verdict on a design that looks too good to be true (never raises)."""
    prompt = render.render_review(problem, design, best)
    agent = build_reviewer(output_retries=runtime.cfg.output_retries, domain=problem.domain,
                           docs=has_docs(deps.docs))
    outcome = await run_agent(agent, prompt, role="analyst", runtime=runtime, deps=deps,
                              model_key="review")
    if not outcome.ok or outcome.output is None:
        reason = compress_report(f"review failed ({outcome.error_kind}): {outcome.error}", 600)
        return Review(cheating=False, reason=reason, failed=True)
    out = outcome.output
    return Review(cheating=bool(out.cheating), reason=out.reason.strip() or "(no reason given)")


def designs_by_id(views: Sequence[DesignView]) -> dict[str, DesignView]:
    return {v.id: v for v in views}
