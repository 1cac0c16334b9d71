"""Owns the PIKE prompts (the domain's `pike` template): each role's system prompt (the brainstorm's asks
for ideas, not code; the Code Optimization Agent's and the Error-Fixing Agent's share the code
contract), the Initial Brainstorming Agent's request, the Code Optimization Agent's (one idea;
improve a working solution, with a direction when other attempts improve it at once), the
Error-Fixing Agent's two (compile and runtime errors with the output's tail; wrong results with
the max difference; both with the device and the rules), the generic directions, and PIKE-O's
mutation and crossover prompts, filled from typed inputs.

The PyTorch domain's text follows the authors' prompts (`pike-project/pike:src/prompt_constructor.py`
and the OpenEvolve fork's templates), with the device, tolerances and integrity rules stratagem
enforces, and an example that fits the device; another domain's template says the same in its
own words. Every function takes the problem's domain from the `ProblemBrief`.
"""

from __future__ import annotations

from collections.abc import Sequence

from stratagem.context.render import (
    ProblemBrief,
    design_summary,
    fill,
    second_baseline_line,
    short_id,
)
from stratagem.core.search import DesignView, Feedback
from stratagem.domains import DEFAULT

ERROR_TAIL_CHARS = 10_000
"""The end of a failed candidate's output shown to the Error-Fixing Agent (PIKE: 10,000)."""
WRONG_KINDS = frozenset({"wrong_output"})
"""Failure kinds the correctness-fix prompt serves; every other failure gets the error prompt."""


CODE_ROLES = frozenset({"optimize", "mutate", "crossover"})
"""Roles that write a candidate from an idea or a working program (the Code Optimization Agent)."""


def instructions(role: str, domain: str = DEFAULT) -> str:
    """The system prompt of one PIKE role: the brainstorm proposes ideas and writes no code;
    the Code Optimization Agent (`optimize`, `mutate`, `crossover`) and the Error-Fixing Agent
    (`fix`) each have their own, with the code contract they share."""
    if role == "brainstorm":
        return fill("pike", "instructions_brainstorm", domain=domain)
    contract = fill("pike", "code_contract", domain=domain)
    if role == "fix":
        return fill("pike", "instructions_fix", domain=domain, code_contract=contract)
    if role in CODE_ROLES:
        return fill("pike", "instructions_optimize", domain=domain, code_contract=contract)
    raise KeyError(f"no PIKE role {role!r}")


def directions(brief: ProblemBrief) -> list[str]:
    """The generic directions (the `pike` template's) for the device: what slots of one seed are
    told to focus on when the brainstorm's ideas run out."""
    text = fill("pike", "directions_cpu" if brief.device.startswith("cpu") else "directions_gpu", domain=brief.domain)
    return [line.strip()[2:].strip() for line in text.splitlines() if line.strip().startswith("- ")]


def _common(brief: ProblemBrief) -> dict[str, str]:
    v = brief.values()
    facts = {k: x for k, x in v.items() if k.startswith("fact_")}
    d = brief.domain
    statement = fill("pike", "problem_statement", domain=d, environment=v["environment"], integrity=v["integrity"],
                     reference_ms=v["reference_ms"], tolerances=v["tolerances"], rules=v["rules"],
                     problem_name=v["problem_name"], **facts)
    example = fill("pike", "example_cpu" if brief.device.startswith("cpu") else "example_gpu", domain=d)
    return {"problem_statement": statement, "example": example, "problem_name": v["problem_name"],
            "problem_source": v["problem_source"], "numbers": v["numbers"], **facts}


def performance(view: DesignView | None, domain: str = DEFAULT) -> str:
    """A design's measured numbers, as every prompt shows them (`render.design_summary`): its
    paired ratio over the reference with the interval and where it stands, its time beside the
    reference's time of its own evaluation, and the chained ratio against the domain's second
    baseline (if any) marked as such."""
    if view is None or view.speedup is None:
        return "not measured"
    second = second_baseline_line(view, domain)
    return design_summary(view, domain).removeprefix(f"{view.status}, ") + (f"; {second}" if second else "")


def brainstorm(brief: ProblemBrief, n_ideas: int) -> str:
    c = _common(brief)
    return fill("pike", "brainstorm", domain=brief.domain, n_ideas=n_ideas, **c)


def optimize(brief: ProblemBrief, idea: str) -> str:
    return fill("pike", "optimize", domain=brief.domain, idea=idea.strip() or "make it faster", **_common(brief))


def improve(brief: ProblemBrief, seed: DesignView | None, direction: str | None = None) -> str:
    """Improve a working solution; `None`: the original program is the seed. `direction`: what
    this attempt focuses on, when other attempts improve the same seed at once."""
    source = seed.source if seed is not None else brief.source
    d = brief.domain
    focus = ("\n\n" + fill("pike", "direction", domain=d, direction=direction.strip())
             if direction and direction.strip() else "")
    return fill("pike", "improve", domain=d, seed_source=source.strip(), direction=focus,
                performance=performance(seed, d) if seed is not None else "the original program", **_common(brief))


def mutate(brief: ProblemBrief, current: DesignView | None) -> str:
    source = current.source if current is not None else brief.source
    return fill("pike", "mutate", domain=brief.domain, current_source=source.strip(),
                performance=performance(current, brief.domain) if current is not None else "the original program",
                **_common(brief))


def crossover(brief: ProblemBrief, current: DesignView | None, features: str, top: Sequence[DesignView],
              inspirations: Sequence[DesignView], source_chars: int = 12_000) -> str:
    """The crossover prompt: the current program with its fitness, features and evaluation
    outcome, the top programs and the inspiration programs."""
    source = current.source if current is not None else brief.source
    artifacts = "the original program" if current is None else (current.report.strip() or "all validators passed")
    d = brief.domain
    return fill("pike", "crossover", domain=d, current_source=source.strip(),
                performance=performance(current, d) if current is not None else "the original program",
                features=features, artifacts=artifacts[:2_000],
                top_programs=_programs(top, source_chars, d) or "(none yet)",
                inspirations=_programs(inspirations, source_chars, d) or "(none yet)", **_common(brief))


def _programs(views: Sequence[DesignView], source_chars: int, domain: str = DEFAULT) -> str:
    per = max(1_000, source_chars // max(1, len(views)))
    return "\n\n".join(fill("pike", "program", domain=domain, short_id=short_id(v.id),
                            performance=performance(v, domain), source=v.source.strip()[:per]) for v in views)


def fix(brief: ProblemBrief, failed_source: str, fb: Feedback) -> str:
    """The Error-Fixing Agent's prompt for one failed candidate: wrong results get the max
    difference, every other failure (compile, runtime, timeout, a rejected static check) the
    tail of its output."""
    what = f"{fb.validator or 'harness'}: {fb.kind or fb.status}"
    if fb.kind in WRONG_KINDS:
        diff = ("max abs " + f"{fb.max_abs_err:.3g}" if fb.max_abs_err is not None else "unknown")
        if fb.max_rel_err is not None:
            diff += f", max rel {fb.max_rel_err:.3g}"
        return fill("pike", "fix_correctness", domain=brief.domain, failed_source=failed_source.strip(), what=what,
                    max_diff=f"{diff} ({fb.report.strip()[:1_000]})", **_common(brief))
    tail = (fb.error_tail or fb.report or "").strip()[-ERROR_TAIL_CHARS:]
    c = {k: x for k, x in _common(brief).items() if k not in ("example", "numbers")}
    return fill("pike", "fix_error", domain=brief.domain, failed_source=failed_source.strip(), what=what,
                error_tail=tail or "(none)", timed_out="yes" if fb.kind == "timeout" else "no", **c)
