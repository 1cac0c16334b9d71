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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from stratagem.config import SearchConfig
from stratagem.context.curate import compress_report, truncate_source
from stratagem.context.designs import tuned_lines
from stratagem.context.render import (
    BudgetBrief,
    ProblemBrief,
    design_summary,
    fill,
    has,
    render_budget,
    second_baseline_line,
    short_id,
)
from stratagem.context.run_view import InFlight, attempts, focus, fresh_brainstorm_text, run_so_far
from stratagem.core.search import DesignView, Feedback, Remaining
from stratagem.core.text import clip

ERROR_TAIL_CHARS = 10_000
"""The end of a failed candidate's output shown to the Error-Fixing Agent (PIKE: 10,000)."""
WRONG_KINDS = frozenset({"wrong_output"})
"""Failure kinds the correctness-fix prompt serves; every other failure gets the error prompt."""


CODE_ROLES = frozenset({"optimize", "mutate", "crossover"})
"""Roles that write a candidate from an idea or a working program (the Code Optimization Agent)."""


def instructions(role: str, domain: str) -> str:
    """The system prompt of one PIKE role: the brainstorm proposes ideas and writes no code;
    the Code Optimization Agent (`optimize`, `mutate`, `crossover`) and the Error-Fixing Agent
    (`fix`) each have their own, with the code contract they share."""
    if role == "brainstorm":
        return fill("pike", "instructions_brainstorm", domain=domain)
    if role == "attack":  # the red-team policy's attacker (`search/policies/redteam/prompts.py`), asked like a PIKE role
        return fill("redteam", "instructions", domain=domain)
    contract = fill("pike", "code_contract", domain=domain)
    if role == "fix":
        return fill("pike", "instructions_fix", domain=domain, code_contract=contract)
    if role in CODE_ROLES:
        return fill("pike", "instructions_optimize", domain=domain, code_contract=contract)
    raise KeyError(f"no PIKE role {role!r}")


def directions(brief: ProblemBrief) -> list[str]:
    """The generic directions (the `pike` template's) for the device: what slots of one seed are
    told to focus on when the brainstorm's ideas run out. On a CPU timed on one thread (the
    environment's `threads`), the directions of spreading work over cores (`directions_cpu_cores`,
    where the domain has them) are left out: they cannot gain there."""
    cpu = brief.device.startswith("cpu")
    text = fill("pike", "directions_cpu" if cpu else "directions_gpu", domain=brief.domain)
    threads = brief.environment.get("threads")
    if cpu and has("pike", "directions_cpu_cores", brief.domain) and not (isinstance(threads, int) and threads <= 1):
        text += "\n" + fill("pike", "directions_cpu_cores", domain=brief.domain)
    return [line.strip()[2:].strip() for line in text.splitlines() if line.strip().startswith("- ")]


def common(brief: ProblemBrief) -> dict[str, str]:
    """The parts every code prompt shares: the problem statement (environment, integrity, the
    reference's timings, tolerances, the rules the harness enforces, the budget), an example for
    the device, the problem's name and source."""
    v = brief.values()
    facts = {k: x for k, x in v.items() if k.startswith("fact_")}
    d = brief.domain
    statement = fill("pike", "problem_statement", domain=d, environment=v["environment"], integrity=v["integrity"],
                     reference_ms=v["reference_ms"], tolerances=v["tolerances"], rules=v["rules"],
                     problem_name=v["problem_name"], **facts)
    if brief.budget:
        statement += "\n\n" + fill("pike", "budget", domain=d, budget=brief.budget)
    example = fill("pike", "example_cpu" if brief.device.startswith("cpu") else "example_gpu", domain=d)
    return {"problem_statement": statement, "example": example, "problem_name": v["problem_name"],
            "problem_source": v["problem_source"], "numbers": v["numbers"], **facts}


def performance(view: DesignView | None, domain: str) -> str:
    """A design's measured numbers, as every prompt shows them (`render.design_summary`): its
    paired ratio over the reference with the interval and where it stands, its time beside the
    reference's time of its own evaluation, and the chained ratio against the domain's second
    baseline (if any) marked as such."""
    if view is None or view.speedup is None:
        return "not measured"
    second = second_baseline_line(view, domain)
    return design_summary(view, domain).removeprefix(f"{view.status}, ") + (f"; {second}" if second else "")


def measured(view: DesignView | None, domain: str) -> str:
    """`performance` of a design shown with its code, and, for a tuned point, its parameters and
    every point of its template with its verdict (`designs.tuned_lines`)."""
    if view is None:
        return "the original program"
    lines = tuned_lines(view)
    return performance(view, domain) + "".join(f"\n- {line}" for line in lines)


def budget(search: SearchConfig, remaining: Remaining, step: int, step_name: str, slots: int,
           max_fix: int, domain: str, *, steps: int | None = None) -> str:
    """The budget block of a PIKE prompt: the run's limits and what is left (`render_budget`),
    the queries of this phase's (or batch's) first queries asked at once counted as in flight
    (each of its prompts is one of them), and this step's share with the fix rounds each attempt
    keeps. `steps`: the run's step limit (None: none, the budgets end the run)."""
    in_flight = min(slots, int(remaining.queries)) if remaining.queries is not None else slots
    run = render_budget(replace(BudgetBrief.of(search, remaining, step, step_name=step_name, in_flight=in_flight),
                                steps=steps))
    share = fill("pike", "budget_phase", domain=domain, step_name=step_name, slots=slots, max_fix=max_fix,
                 per_slot=1 + max_fix)
    return f"{run}\n{share}"


def brainstorm(brief: ProblemBrief, n_ideas: int, designs: Sequence[DesignView] | None = None) -> str:
    """The Initial Brainstorming Agent's request; with `designs` (a fresh brainstorm, asked when
    the directions the run knows are spent), told the directions the run took and what their
    attempts measured, and asked for new ones only."""
    c = common(brief)
    side = "cpu" if brief.device.startswith("cpu") else "gpu"
    examples = fill("pike", f"brainstorm_examples_{side}", domain=brief.domain)
    text = fill("pike", "brainstorm", domain=brief.domain, n_ideas=n_ideas, examples=examples, **c)
    return text if designs is None else f"{text}\n\n{fresh_brainstorm_text(designs)}"


def optimize(brief: ProblemBrief, idea: str, designs: Sequence[DesignView] = (),
             in_flight: Sequence[InFlight] = ()) -> str:
    """A first query with an idea (PIKE-B's phase 0), followed by the run so far: the attempts
    asked beside it (`in_flight`), and what is measured when a resumed phase has anything."""
    return fill("pike", "optimize", domain=brief.domain, idea=idea.strip() or "make it faster",
                run_so_far=run_so_far(designs, None, brief.domain, in_flight=in_flight), **common(brief))


def improve(brief: ProblemBrief, seed: DesignView | None, direction: str | None = None,
            designs: Sequence[DesignView] = (), *, why: str = "", steer: Steer | None = None,
            in_flight: Sequence[InFlight] = ()) -> str:
    """Improve a working solution; `None`: the original program is the seed. `direction`: what
    this attempt focuses on, when other attempts improve the same seed (`steer`: why, and the
    directions the run's numbers contradict). `designs`: the run's designs, from which the
    earlier attempts on the seed and its siblings (`earlier`) and the whole run's best and
    newest results (`run_view.run_so_far`, with `why` the seed was chosen and the attempts
    `in_flight` beside this one) are shown."""
    source = seed.source if seed is not None else brief.source
    d = brief.domain
    before = earlier(seed, designs, d)
    listed = [v.id for v in designs if f"`{short_id(v.id)}`" in before]
    return fill("pike", "improve", domain=d, seed_source=source.strip(), direction=_focus(direction, d, steer),
                earlier=before, run_so_far=run_so_far(designs, seed, d, shown=[seed.id] if seed else [],
                                                      skip=listed, why=why, in_flight=in_flight),
                performance=measured(seed, d), **common(brief))


EARLIER_LINES = 8
"""At most this many earlier attempts of each kind (on the seed, on its siblings) in a prompt."""


def focus_of(view: DesignView) -> str:
    """What a PIKE design was asked to try: its slot's `focus` (idea or direction), else its label."""
    f = focus(view)
    return clip(f, 100) if f else view.strategy or "open prompt"


def _outcome(view: DesignView, domain: str) -> str:
    if view.speedup is not None:
        return f"{view.status}, {performance(view, domain)}"
    why = next((line.strip() for line in view.report.splitlines() if line.strip()), "")
    return f"{view.status}" + (f": {clip(why, 160)}" if why else "")


def earlier(seed: DesignView | None, designs: Sequence[DesignView], domain: str) -> str:
    """The attempts made from `seed` (None: the original program) and from its siblings (designs
    with the seed's parent), each with what it tried and its outcome (an attempt's best design,
    else its last fix, stands for it: `run_view.attempts`); empty when there are none."""
    tried = attempts(designs)

    def from_(parent: str | None, relation: str) -> list[str]:
        mine = [a for a in tried if (a.first.parents[0] if a.first.parents else None) == parent
                and (seed is None or a.first.id != seed.id and a.result.id != seed.id)]
        return [fill("pike", "attempt", domain=domain, short_id=short_id(a.result.id), relation=relation,
                     how=focus_of(a.first), outcome=_outcome(a.result, domain)) for a in mine[-EARLIER_LINES:]]

    lines = from_(seed.id if seed is not None else None, "from this one")
    if seed is not None:
        lines += from_(seed.parents[0] if seed.parents else None, "a sibling")
    return fill("pike", "earlier", domain=domain, attempts="\n".join(lines)) if lines else ""


def restated(prompt: str, twins: Sequence[DesignView | str], domain: str) -> str:
    """`prompt` again, told that the answers to it so far restated `twins` (earlier designs,
    or their ids), so the model writes something else."""
    what = "; ".join(f"design `{short_id(t)}`" if isinstance(t, str)
                     else f"design `{short_id(t.id)}` ({_outcome(t, domain)})" for t in twins)
    return f"{prompt}\n\n" + fill("pike", "restated", domain=domain, what=what)


@dataclass(frozen=True)
class Steer:
    """What a direction is handed out with (`run_view.ranked_directions`)."""

    why: str = ""
    """Why this direction, from the run's measurements."""
    lost: str = ""
    """The directions the measurements contradict, in words ('' when none)."""
    spent: str = ""
    """Given no direction because every one the run knows is spent: the request to brainstorm a
    new one (`run_view.spent_text`); '' otherwise."""


def _focus(direction: str | None, domain: str, steer: Steer | None = None) -> str:
    """The `direction` paragraph with why it was chosen and the contradicted directions (without
    a direction: the request for a new one when the known ones are spent, else the contradicted
    ones alone, if any)."""
    steer = steer or Steer()
    if (not direction or not direction.strip()) and steer.spent:
        return "\n\n" + steer.spent
    lost = "\n" + fill("evidence", "directions_lost", domain=None, lost=steer.lost) if steer.lost else ""
    if not direction or not direction.strip():
        return "\n" + lost if lost else ""
    why = "\n" + fill("evidence", "direction_why", domain=None, why=steer.why) if steer.why else ""
    return "\n\n" + fill("pike", "direction", domain=domain, direction=direction.strip()) + why + lost


def mutate(brief: ProblemBrief, current: DesignView | None, direction: str | None = None,
           designs: Sequence[DesignView] = (), *, why: str = "", steer: Steer | None = None,
           in_flight: Sequence[InFlight] = ()) -> str:
    """PIKE-O's mutation prompt: the original and the current program, the run so far
    (`run_view.run_so_far`, with the attempts `in_flight` beside it) and a `direction` to focus on."""
    source = current.source if current is not None else brief.source
    d = brief.domain
    return fill("pike", "mutate", domain=d, current_source=source.strip(),
                direction=_focus(direction, d, steer),
                run_so_far=run_so_far(designs, current, d, shown=[current.id] if current else [], why=why,
                                      in_flight=in_flight),
                performance=measured(current, d), **common(brief))


def crossover(brief: ProblemBrief, current: DesignView | None, features: str, top: Sequence[DesignView],
              inspirations: Sequence[DesignView], source_chars: int = 12_000, direction: str | None = None,
              designs: Sequence[DesignView] = (), *, why: str = "", steer: Steer | None = None,
              in_flight: Sequence[InFlight] = ()) -> str:
    """The crossover prompt: the current program with its fitness, features and evaluation
    outcome, the top programs and the inspiration programs (their code within `source_chars`,
    the best cut last), the run so far (with the attempts `in_flight` beside it), and a
    `direction` to focus on."""
    source = current.source if current is not None else brief.source
    artifacts = "the original program" if current is None else (current.report.strip() or "all validators passed")
    d = brief.domain
    sources = {v.id: v.source for v in designs}
    shown = [*([current.id] if current else []), *(v.id for v in (*top, *inspirations))]
    none = ("(none yet)" if not any(v.speedup is not None for v in designs)
            else fill("evidence", "all_shown", domain=None))
    return fill("pike", "crossover", domain=d, current_source=source.strip(),
                performance=measured(current, d), features=features, artifacts=compress_report(artifacts, ARTIFACT_CHARS),
                top_programs=_programs(top, source_chars, d, sources) or none,
                inspirations=_programs(inspirations, source_chars, d, sources) or none,
                run_so_far=run_so_far(designs, current, d, shown=shown, why=why, in_flight=in_flight),
                direction=_focus(direction, d, steer), **common(brief))


ARTIFACT_CHARS = 2_000
"""The current program's evaluation outcome in a crossover prompt, compressed to this size."""
MIN_PROGRAM_CHARS = 1_000
"""A listed program's code is never cut below this many characters."""


def _programs(views: Sequence[DesignView], source_chars: int, domain: str,
              sources: Mapping[str, str] | None = None) -> str:
    """The programs in order (best first), each with its numbers and code: each gets what it
    needs while the budget lasts and the later (weaker) ones are cut first, at least
    `MIN_PROGRAM_CHARS` each; a cut keeps the lines the program changed from its parents
    (`truncate_source`) and says where and how much was cut."""
    sources = sources or {}
    left = source_chars
    out = []
    for i, v in enumerate(views):
        code = v.source.strip()
        later = len(views) - i - 1
        room = max(MIN_PROGRAM_CHARS, left - later * MIN_PROGRAM_CHARS)
        if len(code) > room:
            code = truncate_source(code, room, [sources[p] for p in v.parents if p in sources])
        left -= len(code)
        out.append(fill("pike", "program", domain=domain, short_id=short_id(v.id),
                        performance=measured(v, domain), source=code))
    return "\n\n".join(out)


def tail_of(text: str, chars: int) -> str:
    """The last `chars` characters of `text` from a line's start, headed by how much was cut."""
    if len(text) <= chars:
        return text
    kept = text[-chars:]
    kept = kept[kept.find("\n") + 1:] if "\n" in kept else kept
    cut = text[: len(text) - len(kept)]
    return f"[... {cut.count(chr(10)) + 1} lines ({len(cut)} characters) cut above ...]\n{kept}"


def fix(brief: ProblemBrief, failed_source: str, fb: Feedback, designs: Sequence[DesignView] = (),
        start: DesignView | None = None, in_flight: Sequence[InFlight] = ()) -> str:
    """The Error-Fixing Agent's prompt for one failed candidate: wrong results get the max
    difference, every other failure (compile, runtime, timeout, a rejected static check) the
    tail of its output; then the run so far as every writer sees it, compact (the run's best
    with their numbers, the attempts since `start`, the design the failed one was built on,
    and those `in_flight` beside it; no code: the prompt carries two programs already), so the
    fix keeps to what the run has learned."""
    what = f"{fb.validator or 'harness'}: {fb.kind or fb.status}"
    d = brief.domain
    run = run_so_far(designs, start, d, skip=[fb.design_id], in_flight=in_flight, compact=True)
    run = f"{run}\n\n" + fill("evidence", "fix_task", domain=None) if run else ""
    if fb.kind in WRONG_KINDS:
        diff = ("max abs " + f"{fb.max_abs_err:.3g}" if fb.max_abs_err is not None else "unknown")
        if fb.max_rel_err is not None:
            diff += f", max rel {fb.max_rel_err:.3g}"
        return fill("pike", "fix_correctness", domain=d, failed_source=failed_source.strip(), what=what,
                    max_diff=f"{diff} ({compress_report(fb.report.strip(), 1_000)})", run_so_far=run, **common(brief))
    tail = tail_of((fb.error_tail or fb.report or "").strip(), ERROR_TAIL_CHARS)
    c = {k: x for k, x in common(brief).items() if k not in ("example", "numbers")}
    return fill("pike", "fix_error", domain=d, failed_source=failed_source.strip(), what=what,
                error_tail=tail or "(none)", timed_out="yes" if fb.kind == "timeout" else "no", run_so_far=run, **c)
