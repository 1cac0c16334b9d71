"""Owns the command domain's prompt templates (the `*.md` files of this folder, package data:
one per role, `pike` and `design`; `context/render.py` fills them), the facts they are filled
with (`prompt_facts`: the problem's files, commands, hidden inputs, comparison, timing and
forbidden dependencies, from its `Spec` and bundle; `CommandDomain.agent_facts` hands them on as
`$fact_NAME` values), and its offline design: the reference's editable files, unchanged."""

from __future__ import annotations

from collections.abc import Mapping

from stratagem.core.design import FILE_MARKER, files_text
from stratagem.core.problem import Problem
from stratagem.core.text import clip
from stratagem.domains.command import problem as problems
from stratagem.domains.command.spec import Spec
from stratagem.domains.prompts import PackagePrompts

FIXED_FILE_CHARS = 12_000
"""A fixed file shown to the agents is cut to this many characters (the harness keeps it whole)."""


def marked(files: Mapping[str, str], limit: int | None = None) -> str:
    """Files as the agents read and write them: each under its `FILE_MARKER` line, even one."""
    out = []
    for name, text in files.items():
        body = clip(text, limit) if limit is not None and len(text) > limit else text
        out.append(f"{FILE_MARKER.format(name=name)}\n{body.rstrip(chr(10))}\n")
    return "".join(out).rstrip("\n")


def _inputs(spec: Spec) -> list[str]:
    lines = ["`{seed}`: a secret seed from 1 to 2^31-1, drawn anew for every evaluation"]
    for s in spec.sizes:
        step = f", a multiple of {s.multiple_of}" if s.multiple_of > 1 else ""
        lines.append(f"`{{{s.name}}}`: a size drawn for every evaluation from {s.low} to {s.high}{step}")
    return lines


def _correctness(spec: Spec) -> str:
    c = spec.compare
    if c.mode == "check":
        what = "the problem's check command decides whether the design's output agrees with the reference's"
    else:
        where = (f"the numbers under the key `{c.key}` of the last JSON line on stdout that has it" if c.mode == "json"
                 else f"the numbers the run writes to `{c.file}` (removed before every run)")
        what = (f"{where} must agree with the reference's within atol={c.atol:g} + rtol={c.rtol:g} x |reference| "
                "(the same count; NaN and infinities where the reference has them)")
    return (f"{what}, on {spec.trials} hidden input(s) per evaluation and on the timed runs' outputs; "
            "the reference's outputs on the same inputs are the ground truth")


def _objective(spec: Spec) -> str:
    o = spec.objective
    src = {"json": f"the number under the key `{o.key}` of the last JSON line on stdout that has it",
           "regex": f"the last match of the regex `{o.regex}` on stdout",
           "clock": "the wall time the harness measures around the run"}[o.source]
    t = spec.timing
    return (f"one run's time is {src} (in {o.unit}), lower is better. The reference and the design run "
            f"alternately on one more hidden input ({t.warmup} untimed warm-up run(s) each, then up to {t.pairs * t.runs} "
            "pairs of single runs, fewer once the interval is tight); the speedup is the median reference/design block-pair ratio with a 95% "
            "interval. A reported time must fit inside the wall time the harness measured around its run, and "
            f"the time outside it may not exceed the reference's by more than {o.clock_slack:g} x its wall time "
            f"+ {o.clock_slack_ms:g} ms")


def _forbidden(spec: Spec) -> list[str]:
    fb = spec.forbid
    out = []
    if fb.libraries:
        out.append(f"libraries (link names) {', '.join(fb.libraries)}: not on a link line (`-l...`, `lib....so`/`.a`) in the design's "
                   "files, not among the built binaries' shared libraries (direct or transitive), not named in them")
    if fb.symbols:
        out.append(f"symbols {', '.join(fb.symbols)}: not defined or imported by the built binaries")
    if fb.sources:
        out.append(f"source patterns (regexes) {', '.join(f'`{s}`' for s in fb.sources)}: in no file of the design")
    if not fb.allow_dlopen:
        out.append("loading libraries at run time: no `dlopen`, `dlmopen` or `dlsym` in the design's files, no "
                   "`dlopen` import in its binaries")
    return out or ["nothing beyond the rules below"]


def prompt_facts(spec: Spec, bundle: problems.Bundle) -> dict[str, object]:
    """The `$fact_NAME` values of the command domain's templates."""
    return {
        "main_file": spec.editable[0],
        "reference_files": marked(bundle.reference_files()),
        "fixed_files": marked(bundle.fixed_files(), FIXED_FILE_CHARS) or "(none)",
        "build": f"`{spec.build.command}` (limit {spec.build.timeout_s:g} s)",
        "run": f"`{spec.run.command}` (limit {spec.run.timeout_s:g} s)",
        "check": (f"`{spec.check.command}` (exit 0: the outputs agree)" if spec.check is not None
                  else "none (the outputs are compared as numbers)"),
        "inputs": _inputs(spec),
        "correctness": _correctness(spec),
        "objective": _objective(spec),
        "forbidden": _forbidden(spec),
    }


def offline_design(problem: Problem) -> str:
    """The reference's editable files as a design (valid, about as fast as the reference)."""
    return files_text(problems.bundle_of(problem.source, problem.path or problem.name).reference_files())


PROMPTS = PackagePrompts(__name__, offline_design)
"""The command domain's `Domain.prompts`."""
