"""Owns the PIKE prompts (`prompts/pike.md`): each role's system prompt (the brainstorm's asks
for ideas, not code; the Code Optimization Agent's and the Error-Fixing Agent's share the code
contract), the Initial Brainstorming Agent's request, the Code Optimization Agent's (one idea;
improve a working solution, with a direction when other attempts improve it at once), the
Error-Fixing Agent's two (compile and runtime errors with the output's tail; wrong results with
the max difference; both with the device and the rules), the generic directions, and PIKE-O's
mutation and crossover prompts, filled from typed inputs.

The text follows the authors' prompts (`pike-project/pike:src/prompt_constructor.py` and the
OpenEvolve fork's templates), with the device, tolerances and integrity rules stratagem
enforces, and an example that fits the device (an inline CUDA kernel on a GPU, an inline C++
function on the CPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from stratagem.context.render import ProblemBrief, design_summary, fill, short_id, timing_lines
from stratagem.core.search import DesignView, Feedback

ERROR_TAIL_CHARS = 10_000
"""The end of a failed candidate's output shown to the Error-Fixing Agent (PIKE: 10,000)."""
WRONG_KINDS = frozenset({"wrong_output"})
"""Failure kinds the correctness-fix prompt serves; every other failure gets the error prompt."""


CODE_ROLES = frozenset({"optimize", "mutate", "crossover"})
"""Roles that write a candidate from an idea or a working program (the Code Optimization Agent)."""


def instructions(role: str) -> str:
    """The system prompt of one PIKE role: the brainstorm proposes ideas and writes no code;
    the Code Optimization Agent (`optimize`, `mutate`, `crossover`) and the Error-Fixing Agent
    (`fix`) each have their own, with the code contract they share."""
    if role == "brainstorm":
        return fill("pike", "instructions_brainstorm")
    contract = fill("pike", "code_contract")
    if role == "fix":
        return fill("pike", "instructions_fix", code_contract=contract)
    if role in CODE_ROLES:
        return fill("pike", "instructions_optimize", code_contract=contract)
    raise KeyError(f"no PIKE role {role!r}")


def directions(brief: ProblemBrief) -> list[str]:
    """The generic directions (`prompts/pike.md`) for the device: what slots of one seed are
    told to focus on when the brainstorm's ideas run out."""
    text = fill("pike", "directions_cpu" if brief.device.startswith("cpu") else "directions_gpu")
    return [line.strip()[2:].strip() for line in text.splitlines() if line.strip().startswith("- ")]


def _common(brief: ProblemBrief) -> dict[str, str]:
    v = brief.values()
    statement = fill("pike", "problem_statement", environment=v["environment"], integrity=v["integrity"],
                     reference_ms=v["reference_ms"], tolerances=v["tolerances"], rules=v["rules"])
    example = fill("pike", "example_cpu" if brief.device.startswith("cpu") else "example_gpu")
    return {"problem_statement": statement, "example": example, "problem_name": v["problem_name"],
            "problem_source": v["problem_source"], "numbers": v["numbers"]}


def performance(view: DesignView | None) -> str:
    """A design's measured numbers, as every prompt shows them (`render.design_summary`): its
    paired ratio over eager with the interval and where it stands, its time beside the eager
    time of its own evaluation, and the chained ratio against torch.compile marked as such."""
    if view is None or view.speedup is None:
        return "not measured"
    compile_line = next((line for line in timing_lines(view) if line.startswith("vs torch.compile")), "")
    return design_summary(view).removeprefix(f"{view.status}, ") + (f"; {compile_line}" if compile_line else "")


def brainstorm(brief: ProblemBrief, n_ideas: int) -> str:
    c = _common(brief)
    return fill("pike", "brainstorm", n_ideas=n_ideas, problem_statement=c["problem_statement"],
                problem_name=c["problem_name"], problem_source=c["problem_source"])


def optimize(brief: ProblemBrief, idea: str) -> str:
    return fill("pike", "optimize", idea=idea.strip() or "make it faster", **_common(brief))


def improve(brief: ProblemBrief, seed: DesignView | None, direction: str | None = None) -> str:
    """Improve a working solution; `None`: the original program is the seed. `direction`: what
    this attempt focuses on, when other attempts improve the same seed at once."""
    source = seed.source if seed is not None else brief.source
    focus = "\n\n" + fill("pike", "direction", direction=direction.strip()) if direction and direction.strip() else ""
    return fill("pike", "improve", seed_source=source.strip(), direction=focus,
                performance=performance(seed) if seed is not None else "the original program", **_common(brief))


def mutate(brief: ProblemBrief, current: DesignView | None) -> str:
    source = current.source if current is not None else brief.source
    return fill("pike", "mutate", current_source=source.strip(),
                performance=performance(current) if current is not None else "the original program",
                **_common(brief))


def crossover(brief: ProblemBrief, current: DesignView | None, features: str, top: Sequence[DesignView],
              inspirations: Sequence[DesignView], source_chars: int = 12_000) -> str:
    """The crossover prompt: the current program with its fitness, features and evaluation
    outcome, the top programs and the inspiration programs."""
    source = current.source if current is not None else brief.source
    artifacts = "the original program" if current is None else (current.report.strip() or "all validators passed")
    return fill("pike", "crossover", current_source=source.strip(),
                performance=performance(current) if current is not None else "the original program",
                features=features, artifacts=artifacts[:2_000],
                top_programs=_programs(top, source_chars) or "(none yet)",
                inspirations=_programs(inspirations, source_chars) or "(none yet)", **_common(brief))


def _programs(views: Sequence[DesignView], source_chars: int) -> str:
    per = max(1_000, source_chars // max(1, len(views)))
    return "\n\n".join(fill("pike", "program", short_id=short_id(v.id), performance=performance(v),
                            source=v.source.strip()[:per]) for v in views)


def fix(brief: ProblemBrief, failed_source: str, fb: Feedback) -> str:
    """The Error-Fixing Agent's prompt for one failed candidate: wrong results get the max
    difference, every other failure (compile, runtime, timeout, a rejected static check) the
    tail of its output."""
    what = f"{fb.validator or 'harness'}: {fb.kind or fb.status}"
    if fb.kind in WRONG_KINDS:
        diff = ("max abs " + f"{fb.max_abs_err:.3g}" if fb.max_abs_err is not None else "unknown")
        if fb.max_rel_err is not None:
            diff += f", max rel {fb.max_rel_err:.3g}"
        return fill("pike", "fix_correctness", failed_source=failed_source.strip(), what=what,
                    max_diff=f"{diff} ({fb.report.strip()[:1_000]})", **_common(brief))
    tail = (fb.error_tail or fb.report or "").strip()[-ERROR_TAIL_CHARS:]
    c = _common(brief)
    return fill("pike", "fix_error", failed_source=failed_source.strip(), what=what, error_tail=tail or "(none)",
                timed_out="yes" if fb.kind == "timeout" else "no", problem_name=c["problem_name"],
                problem_source=c["problem_source"], problem_statement=c["problem_statement"])
