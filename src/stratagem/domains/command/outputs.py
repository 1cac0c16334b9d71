"""Owns reading what a command printed: the reported time (a JSON line's key or a regex's
group, in the objective's unit, turned into ms), the output numbers (a JSON line's key or an
output file), and the declared numeric comparison (atol + rtol x |reference|). Standard library
only: it runs in the worker."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stratagem.domains.command.spec import TIME_UNITS_MS, Comparison, ObjectiveSpec

MAX_NUMBERS = 50_000_000


def json_lines(stdout: str) -> Iterator[dict[str, Any]]:
    """The lines of `stdout` that are JSON objects, in order."""
    for line in stdout.splitlines():
        s = line.strip()
        if s.startswith("{") and s.endswith("}"):
            try:
                v = json.loads(s)
            except ValueError:
                continue
            if isinstance(v, dict):
                yield v


def json_value(stdout: str, key: str) -> Any:
    """The value of `key` in the last JSON line of `stdout` that has it (None: none has)."""
    found = None
    for obj in json_lines(stdout):
        if key in obj:
            found = obj[key]
    return found


def reported_ms(stdout: str, objective: ObjectiveSpec) -> float | None:
    """The time a run reported, in ms (None: it reported none, or the objective is the clock)."""
    if objective.source == "json" and objective.key:
        v = json_value(stdout, objective.key)
    elif objective.source == "regex" and objective.regex:
        found = list(re.finditer(objective.regex, stdout))
        v = found[-1].group(1) if found else None
    else:
        return None
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x * TIME_UNITS_MS[objective.unit] if math.isfinite(x) and x >= 0 else None


def reported_cases_ms(stdout: str, objective: ObjectiveSpec) -> dict[str, float] | str:
    """A per-size objective's times, case -> ms, from the JSON object under the objective's key;
    or why there are none (no such line, a case missing, a value that is not a positive time)."""
    v = json_value(stdout, objective.key or "")
    if not isinstance(v, dict):
        return (f"no JSON line on stdout holds {objective.key!r} as an object of times per case"
                if v is None else f"{objective.key!r} is {type(v).__name__}, not an object of times per case")
    out: dict[str, float] = {}
    for case in objective.cases:
        x = v.get(case)
        if isinstance(x, bool) or not isinstance(x, int | float):
            return f"no time for case {case!r} under {objective.key!r} (cases: {', '.join(objective.cases)})"
        if not math.isfinite(x) or x <= 0:
            return f"case {case!r} reported {x!r}, not a positive time"
        out[case] = float(x) * TIME_UNITS_MS[objective.unit]
    return out


def flatten(value: Any) -> list[float]:
    """Every number in a JSON value (nested lists, dict values in key order), as floats.

    Raises:
        ValueError: a value that is not a number, a list or a dict of them.
    """
    out: list[float] = []

    def walk(v: Any) -> None:
        if isinstance(v, bool):
            out.append(float(v))
        elif isinstance(v, int | float):
            out.append(float(v))
        elif isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
            out.append(float(v))
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for k in sorted(v):
                walk(v[k])
        else:
            raise ValueError(f"not a number: {str(v)[:40]!r}")
        if len(out) > MAX_NUMBERS:
            raise ValueError(f"more than {MAX_NUMBERS} numbers")

    walk(value)
    return out


def text_numbers(text: str) -> list[float]:
    """The numbers of an output file: a JSON value, or numbers separated by spaces, commas,
    semicolons or newlines.

    Raises:
        ValueError: a token that is not a number.
    """
    s = text.strip()
    if s[:1] in "[{":
        try:
            return flatten(json.loads(s))
        except json.JSONDecodeError:
            pass
    return list(map(float, s.replace(",", " ").replace(";", " ").split()))


@dataclass(frozen=True)
class Agreement:
    """Whether two outputs agree under a comparison, and by how much they differ."""

    ok: bool
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def agree(reference: list[float], design: list[float], cmp: Comparison) -> Agreement:
    """Every design number within atol + rtol x |reference| of the reference's; NaN where the
    reference has NaN, the same infinity where it has one."""
    if len(reference) != len(design):
        return Agreement(False, f"the output has {len(design)} numbers, the reference's {len(reference)}",
                         {"numbers": len(design), "reference_numbers": len(reference)})
    atol, rtol = cmp.atol, cmp.rtol
    worst, worst_rel, bad = 0.0, 0.0, 0
    first: int | None = None
    for i, (a, b) in enumerate(zip(reference, design, strict=True)):
        err = a - b if a >= b else b - a  # NaN on either side (or inf - inf) makes it NaN
        size = a if a >= 0 else -a
        if err <= atol + rtol * size < math.inf:  # the common case: finite and close (False for NaN, infinities)
            if err > worst:
                worst = err
            if err and size and err / size > worst_rel:
                worst_rel = err / size
            continue
        if (math.isnan(a) and math.isnan(b)) or (math.isinf(a) and a == b):
            continue  # NaN where the reference's NaN is, the same infinity
        bad += 1
        first = i if first is None else first
        worst = math.inf if math.isnan(err) else max(worst, err)
        worst_rel = math.inf if not size or math.isnan(err) else max(worst_rel, err / size)
    details = {"numbers": len(design), "max_abs_err": worst, "max_rel_err": worst_rel,
               "mismatched": bad, "atol": atol, "rtol": rtol}
    if bad and first is not None:
        i = first
        return Agreement(False, f"{bad} of {len(design)} numbers differ beyond atol={cmp.atol:g} + "
                         f"rtol={cmp.rtol:g} x |reference| (first at index {i}: {design[i]!r}, "
                         f"expected {reference[i]!r})", details)
    return Agreement(True, None, details)
