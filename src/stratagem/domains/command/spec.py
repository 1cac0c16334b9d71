"""Owns `problem.toml`'s typed form (`Spec`) and its parser: every key, its default, and an
error naming the file and the key at fault. Standard library only: the worker parses the same
text the parent did (docs/command.md lists every key)."""

from __future__ import annotations

import re
import string
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stratagem.core.text import is_number
from stratagem.domains.command import formula
from stratagem.errors import ProblemError

PROBLEM_FILE = "problem.toml"

CompareMode = Literal["json", "file", "check"]
ObjectiveSource = Literal["json", "regex", "clock"]

TIME_UNITS_MS: dict[str, float] = {"s": 1000.0, "ms": 1.0, "us": 1e-3, "ns": 1e-6}
"""A reported time's unit -> milliseconds per unit (the harness keeps every time in ms)."""

RUN_FIELDS = frozenset({"seed", "python"})
"""Placeholders every run and check command may use besides the sizes: the hidden seed, and the
Python interpreter running the harness's worker (numpy and scipy come with stratagem)."""
CASE_VARIABLE = "case"
"""The name `[work]` expressions use for a per-size objective's case (its name as a number)."""
RETIMES = 2
"""Paired timings after the first while the verdict is unstable (the last one is kept)."""
CHECK_FIELDS = frozenset({"reference", "design"})
"""Placeholders only a check command may use: the reference's and the design's run directories."""


@dataclass(frozen=True)
class Command:
    """A shell command (`/bin/sh -c`, in the build's directory) and its own time limit."""

    command: str
    timeout_s: float


@dataclass(frozen=True)
class SizeRange:
    """A hidden size: drawn per evaluation from `low..high` (inclusive), a multiple of `multiple_of`."""

    name: str
    low: int
    high: int
    multiple_of: int = 1


@dataclass(frozen=True)
class Comparison:
    """How the design's output is compared with the reference's on the same hidden inputs."""

    mode: CompareMode
    """`json`: a JSON line on stdout holding `key`; `file`: numbers in an output file; `check`:
    the problem's own check command decides (exit 0: the outputs agree)."""
    key: str | None = None
    file: str | None = None
    atol: float = 1e-6
    rtol: float = 1e-6


@dataclass(frozen=True)
class ObjectiveSpec:
    """Where a run's time is read: a JSON line's key, a regex's first group, or the harness's clock."""

    source: ObjectiveSource
    key: str | None = None
    regex: str | None = None
    unit: str = "ms"
    direction: Literal["minimize"] = "minimize"
    clock_slack: float = 0.10
    """A reported time is rejected when the time the run spent outside it exceeds the
    reference's by more than this fraction of the reference's wall time (plus `clock_slack_ms`)."""
    clock_slack_ms: float = 5.0
    cases: tuple[str, ...] = ()
    """Per-size objectives: with cases, one run reports a time per case (a JSON object under
    `key`, case name -> time), each case is timed paired on its own, and the evaluation's figure
    is the geometric mean over cases."""


@dataclass(frozen=True)
class Baseline:
    """A harness-owned program timed beside every design (cuBLAS beside a DGEMM): a folder of
    versions of the editable files, built like a design, exempt from `[forbid]`."""

    name: str
    label: str
    files: str
    """The folder, relative to the problem directory."""


@dataclass(frozen=True)
class TimingSpec:
    """Paired timing: at most `pairs` x `runs` runs of each program, in block pairs of one run
    each (reference and design alternating), stopped once the interval is `target_halfwidth`
    tight and stable (docs/command.md)."""

    pairs: int = 8
    runs: int = 3
    warmup: int = 1
    sizes: tuple[tuple[str, int], ...] = ()
    """The sizes every timed run uses (`[timing.sizes]`; each size's largest value where the
    problem does not say): fixed, so two evaluations of one design time the same work and
    agree within their intervals. Hidden sizes drawn at random stay for correctness."""
    target_halfwidth: float = 0.02
    """The timing stops once its interval's half-width is at most this fraction of its ratio
    and every stability check passes (`core.paired.settled`); 0: every run of the budget."""


@dataclass(frozen=True)
class Forbidden:
    """What a design may not depend on: libraries (by link name, `m` for libm), symbols (fnmatch
    patterns), source patterns (regexes), and `dlopen` unless allowed."""

    libraries: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    allow_dlopen: bool = True
    """Defaults to False when any library is forbidden (a dlopen reaches any library)."""


@dataclass(frozen=True)
class Work:
    """The work one run does, per the drawn sizes, and the machine's ceilings: the floor no
    honest run's reported time can go under (max of flops / peak rate, bytes / peak bandwidth)."""

    flops: str | None = None
    """An expression over the sizes (`2 * n * w`)."""
    bytes: str | None = None
    peak_gflops: float | None = None
    peak_gbps: float | None = None

    @property
    def declared(self) -> bool:
        return (self.flops is not None and self.peak_gflops is not None) or (
            self.bytes is not None and self.peak_gbps is not None)


@dataclass(frozen=True)
class Spec:
    """One command problem, as `problem.toml` declares it."""

    name: str
    description: str
    hints: tuple[str, ...]
    docs: str | None
    """A folder of text for the agents, relative to the problem directory."""
    editable: tuple[str, ...]
    fixed: tuple[str, ...]
    reference: str
    """The folder holding the reference's versions of the editable files."""
    build: Command
    run: Command
    check: Command | None
    sizes: tuple[SizeRange, ...]
    trials: int
    compare: Comparison
    objective: ObjectiveSpec
    timing: TimingSpec
    forbid: Forbidden
    timeout_s: float | None = None
    """The whole evaluation's run limit (None: derived from the commands' limits)."""
    work: Work = Work()
    requires_gpu: bool = False
    """`[requires] gpu`: on a CPU-only evaluation the design is built, then `needs_gpu`."""
    baselines: tuple[Baseline, ...] = ()


class _Reader:
    """Typed reads of one TOML table, each failure naming the file and the dotted key."""

    def __init__(self, where: str, table: Mapping[str, Any], prefix: str = "") -> None:
        self.where, self.table, self.prefix = where, table, prefix

    def fail(self, key: str, why: str) -> ProblemError:
        return ProblemError(f"{self.where}: key `{self.prefix}{key}`: {why}")

    def sub(self, key: str, required: bool = False) -> _Reader:
        v = self.table.get(key)
        if v is None:
            if required:
                raise self.fail(key, "missing (a table is required)")
            return _Reader(self.where, {}, f"{self.prefix}{key}.")
        if not isinstance(v, dict):
            raise self.fail(key, f"must be a table, not {type(v).__name__}")
        return _Reader(self.where, v, f"{self.prefix}{key}.")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None, required: bool = False) -> Any:
        if key not in self.table:
            if required:
                raise self.fail(key, "missing")
            return default
        v = self.table[key]
        if isinstance(v, bool) and kind in (int, float, (int, float)):
            raise self.fail(key, f"must be a number, not {v!r}")
        if not isinstance(v, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(key, f"must be {names}, not {type(v).__name__} ({v!r})")
        return v

    def strings(self, key: str, required: bool = False) -> tuple[str, ...]:
        v = self.get(key, list, [], required)
        if not all(isinstance(x, str) and x for x in v):
            raise self.fail(key, "must be a list of non-empty strings")
        return tuple(v)

    def positive(self, key: str, default: float | None, required: bool = False) -> float:
        v = self.get(key, (int, float), default, required)
        if v is None or v <= 0:
            raise self.fail(key, f"must be a positive number, not {v!r}")
        return float(v)

    def count(self, key: str, default: int) -> int:
        v = self.get(key, int, default)
        if v < 1:
            raise self.fail(key, f"must be at least 1, not {v}")
        return int(v)

    def known(self, keys: set[str]) -> None:
        unknown = sorted(set(self.table) - keys)
        if unknown:
            raise self.fail(unknown[0], f"unknown key (known here: {', '.join(sorted(keys))})")


def fields_of(command: str) -> set[str]:
    """The placeholder names in a command (`{seed}`, `{n}`); `{{` and `}}` are literal braces."""
    try:
        return {f for _, f, _, _ in string.Formatter().parse(command) if f is not None}
    except ValueError as e:
        raise ValueError(f"unbalanced braces ({e}); write a literal brace as {{{{ or }}}}") from e


def _command(r: _Reader, key: str, required: bool, allowed: set[str], default_timeout_s: float) -> Command | None:
    t = r.sub(key, required)
    if not t.table and not required:
        return None
    t.known({"command", "timeout_s"})
    text = t.get("command", str, required=True)
    try:
        used = fields_of(text)
    except ValueError as e:
        raise t.fail("command", str(e)) from None
    bad = sorted(f for f in used if f not in allowed)
    if bad:
        raise t.fail("command", f"placeholder {{{bad[0]}}} is not known here (known: "
                     f"{', '.join('{' + a + '}' for a in sorted(allowed)) or 'none'})")
    return Command(text, t.positive("timeout_s", default_timeout_s))


def _relative(r: _Reader, key: str, path: str) -> str:
    if path.startswith("/") or ".." in path.split("/") or "\\" in path:
        raise r.fail(key, f"{path!r} must be a relative path inside the problem directory")
    return path


TOP_KEYS = {"name", "description", "hints", "docs", "timeout_s", "files", "build", "run", "check", "inputs",
            "compare", "objective", "timing", "forbid", "work", "requires", "baselines"}


def _timing_sizes(tm: Any, sizes: tuple[SizeRange, ...]) -> tuple[tuple[str, int], ...]:
    """`[timing.sizes]`: a value for each hidden size, within its range (default: its largest
    value, a multiple of `multiple_of`)."""
    given = tm.get("sizes", dict, {}) or {}
    unknown = sorted(set(given) - {s.name for s in sizes})
    if unknown:
        raise tm.fail("sizes", f"{unknown[0]!r} is not a size of [inputs.sizes]")
    out = []
    for s in sizes:
        v = given.get(s.name, s.high // s.multiple_of * s.multiple_of)
        if not isinstance(v, int) or not s.low <= v <= s.high or v % s.multiple_of:
            raise tm.fail("sizes", f"{s.name} = {v!r} must be an integer in {s.low}..{s.high}, a multiple of "
                          f"{s.multiple_of}")
        out.append((s.name, v))
    return tuple(out)


def _sizes(r: _Reader) -> tuple[SizeRange, ...]:
    sizes = []
    sz = r.sub("sizes")
    for name, v in sz.table.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in RUN_FIELDS | CHECK_FIELDS | {CASE_VARIABLE}:
            raise sz.fail(name, "a size's name must be an identifier other than seed, python, reference, design, case")
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            lo, hi, mult = int(v[0]), int(v[1]), 1
        elif isinstance(v, dict):
            t = sz.sub(name)
            t.known({"low", "high", "multiple_of"})
            lo, hi, mult = t.get("low", int, required=True), t.get("high", int, required=True), t.count("multiple_of", 1)
        else:
            raise sz.fail(name, f"must be [low, high] (integers) or {{low, high, multiple_of}}, not {v!r}")
        if not 0 < lo <= hi or hi // mult * mult < lo:
            raise sz.fail(name, f"needs 0 < low <= high and a multiple of {mult} between them (got {lo}, {hi})")
        sizes.append(SizeRange(name, lo, hi, mult))
    return tuple(sizes)


def _compare(r: _Reader, check: Command | None) -> Comparison:
    cmp = r.sub("compare", required=True)
    cmp.known({"mode", "key", "file", "atol", "rtol"})
    mode = cmp.get("mode", str, required=True)
    if mode not in ("json", "file", "check"):
        raise cmp.fail("mode", f"must be json, file or check, not {mode!r}")
    if mode == "json" and not cmp.get("key", str):
        raise cmp.fail("key", "required with mode = \"json\" (the key of the JSON line holding the output)")
    if mode == "file" and not cmp.get("file", str):
        raise cmp.fail("file", "required with mode = \"file\" (the output file, relative to the run directory)")
    if mode == "check" and check is None:
        raise cmp.fail("mode", "mode = \"check\" needs a [check] command")
    out_file = cmp.get("file", str)
    compare = Comparison(mode, cmp.get("key", str), _relative(cmp, "file", out_file) if out_file else None,
                         float(cmp.get("atol", (int, float), 1e-6)), float(cmp.get("rtol", (int, float), 1e-6)))
    if compare.atol < 0 or compare.rtol < 0:
        raise cmp.fail("atol", "atol and rtol must be >= 0")
    return compare


def _objective(r: _Reader) -> ObjectiveSpec:
    obj = r.sub("objective", required=True)
    obj.known({"source", "key", "regex", "unit", "direction", "clock_slack", "clock_slack_ms", "cases"})
    source = obj.get("source", str, required=True)
    if source not in ("json", "regex", "clock"):
        raise obj.fail("source", f"must be json, regex or clock, not {source!r}")
    if source == "json" and not obj.get("key", str):
        raise obj.fail("key", "required with source = \"json\"")
    regex = obj.get("regex", str)
    if source == "regex":
        _check_regex(obj, regex)
    unit = obj.get("unit", str, "ms")
    if unit not in TIME_UNITS_MS:
        raise obj.fail("unit", f"must be a time unit ({', '.join(TIME_UNITS_MS)}), not {unit!r}")
    if obj.get("direction", str, "minimize") != "minimize":
        raise obj.fail("direction", "only minimize is supported (the objective is a time)")
    cases = obj.strings("cases")
    if cases and source != "json":
        raise obj.fail("cases", "per-size cases need source = \"json\" (a JSON object, case name -> time)")
    if len(set(cases)) != len(cases):
        raise obj.fail("cases", f"names a case twice: {cases}")
    return ObjectiveSpec(source, obj.get("key", str), regex, unit, "minimize",
                         float(obj.get("clock_slack", (int, float), 0.10)),
                         float(obj.get("clock_slack_ms", (int, float), 5.0)), cases)


def _check_regex(obj: _Reader, regex: str | None) -> None:
    """The objective's regex: given, valid, with a group around the number."""
    if not regex:
        raise obj.fail("regex", "required with source = \"regex\"")
    try:
        groups = re.compile(regex).groups
    except re.error as e:
        raise obj.fail("regex", f"not a valid regex: {e}") from None
    if groups < 1:
        raise obj.fail("regex", "needs a group around the number")


def _baselines(r: _Reader) -> tuple[Baseline, ...]:
    t = r.sub("baselines")
    out = []
    for name in t.table:
        if not re.fullmatch(r"[A-Za-z_][\w-]*", name) or name in ("reference", "design"):
            raise t.fail(name, "a baseline's name must be an identifier other than reference and design")
        b = t.sub(name, required=True)
        b.known({"label", "files"})
        out.append(Baseline(name, b.get("label", str, name), _relative(b, "files", b.get("files", str, required=True))))
    return tuple(out)


def _forbid(r: _Reader) -> Forbidden:
    fb = r.sub("forbid")
    fb.known({"libraries", "symbols", "sources", "allow_dlopen"})
    for pattern in fb.strings("sources"):
        try:
            re.compile(pattern)
        except re.error as e:
            raise fb.fail("sources", f"{pattern!r} is not a valid regex: {e}") from None
    libraries = fb.strings("libraries")
    return Forbidden(libraries, fb.strings("symbols"), fb.strings("sources"),
                     bool(fb.get("allow_dlopen", bool, not libraries)))


def _work(r: _Reader, sizes: tuple[SizeRange, ...], cases: tuple[str, ...]) -> Work:
    w = r.sub("work")
    if not w.table:
        return Work()
    w.known({"flops", "bytes", "peak_gflops", "peak_gbps"})
    names = {s.name for s in sizes} | ({CASE_VARIABLE} if cases else set())
    bad = [c for c in cases if not is_number(c)]
    if bad:
        raise w.fail("flops", f"work per case needs numeric case names ({bad[0]!r} is not a number)")
    exprs = {}
    for key in ("flops", "bytes"):
        text = w.get(key, str)
        if text is not None:
            try:
                formula.check(text, names)
            except ValueError as e:
                raise w.fail(key, str(e)) from None
        exprs[key] = text
    peaks = {k: (w.positive(k, None) if w.get(k, (int, float)) is not None else None)
             for k in ("peak_gflops", "peak_gbps")}
    work = Work(exprs["flops"], exprs["bytes"], peaks["peak_gflops"], peaks["peak_gbps"])
    if not work.declared:
        raise w.fail("flops", "declare flops with peak_gflops, or bytes with peak_gbps (or both)")
    return work


def parse_spec(text: str, where: str, default_name: str) -> Spec:
    """`problem.toml`'s text as a Spec.

    Raises:
        ProblemError: the TOML is malformed, or a key is missing, unknown or of the wrong kind
            (the message names `where` and the key).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProblemError(f"{where}: not valid TOML: {e}") from None
    r = _Reader(where, data)
    r.known(TOP_KEYS)
    files = r.sub("files", required=True)
    files.known({"editable", "fixed", "reference"})
    editable = tuple(_relative(files, "editable", p) for p in files.strings("editable", required=True))
    if not editable:
        raise files.fail("editable", "must name at least one file a design may change")
    fixed = tuple(_relative(files, "fixed", p) for p in files.strings("fixed"))
    both = sorted(set(editable) & set(fixed))
    if both:
        raise files.fail("fixed", f"{both[0]!r} is listed as editable too")
    inputs = r.sub("inputs")
    inputs.known({"trials", "sizes"})
    sizes = _sizes(inputs)
    run_fields = set(RUN_FIELDS) | {s.name for s in sizes}
    build = _command(r, "build", True, set(), 120.0)
    run = _command(r, "run", True, run_fields, 60.0)
    check = _command(r, "check", False, run_fields | CHECK_FIELDS, 60.0)
    assert build is not None and run is not None
    tm = r.sub("timing")
    tm.known({"pairs", "runs", "warmup", "sizes", "target_halfwidth"})
    warmup = tm.get("warmup", int, 1)
    if warmup < 0:
        raise tm.fail("warmup", f"must be >= 0, not {warmup}")
    target = float(tm.get("target_halfwidth", (int, float), 0.02))
    if not 0 <= target < 1:
        raise tm.fail("target_halfwidth", f"must be a fraction in [0, 1), not {target}")
    timed = _timing_sizes(tm, sizes)
    docs = r.get("docs", str)
    timeout = r.get("timeout_s", (int, float))
    needs = r.sub("requires")
    needs.known({"gpu"})
    objective = _objective(r)
    return Spec(
        name=r.get("name", str, default_name), description=r.get("description", str, ""),
        hints=r.strings("hints"), docs=_relative(r, "docs", docs) if docs else None,
        editable=editable, fixed=fixed,
        reference=_relative(files, "reference", files.get("reference", str, "reference")),
        build=build, run=run, check=check, sizes=sizes, trials=inputs.count("trials", 2),
        compare=_compare(r, check), objective=objective,
        timing=TimingSpec(tm.count("pairs", 8), tm.count("runs", 3), int(warmup), timed, target), forbid=_forbid(r),
        timeout_s=r.positive("timeout_s", None) if timeout is not None else None,
        work=_work(r, sizes, objective.cases), requires_gpu=bool(needs.get("gpu", bool, False)),
        baselines=_baselines(r),
    )
