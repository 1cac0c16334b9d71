"""Owns the static checks: named, ordered checks over a candidate's source, run in the parent.

Each check has a severity: `reject` fails the `static_checks` validator, `warn` is reported
beside a pass. Checks run in registry order; asking for an unknown check name is an error.
Everything works on syntax only (ast, and regexes over the C++/CUDA strings): the parent never
imports torch or runs the candidate. Names are resolved through the candidate's aliases first
(`ast_scan`), so `import torch.cuda as c; c.Stream()` is caught like `torch.cuda.Stream()`.

`DEFAULT_CHECKS` (the `lenient` integrity policy) is every check except `own_kernels`, which
only the `strict` policy adds: the candidate must launch a CUDA or Triton kernel of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from stratagem.core import pysyntax
from stratagem.core.problem import Problem
from stratagem.core.verdict import FailureKind, ValidatorResult
from stratagem.domains.pytorch.static import integrity_checks as ic
from stratagem.domains.pytorch.static import integrity_rules as R
from stratagem.domains.pytorch.static.ast_scan import Scan
from stratagem.domains.pytorch.static.kernel_use import own_kernels, own_kernels_cpu
from stratagem.domains.pytorch.static.state_scan import mutable_state
from stratagem.errors import ConfigError

Severity = Literal["reject", "warn"]


@dataclass(frozen=True)
class Finding:
    """One thing a check found."""

    check: str
    message: str
    line: int | None = None


@dataclass(frozen=True)
class CheckInput:
    """What a static check sees: the parsed candidate and the parsed problem."""

    filename: str
    source: str
    tree: ast.Module
    problem_tree: ast.Module
    _scan: list[Scan] = field(default_factory=list, compare=False, repr=False)

    @property
    def scan(self) -> Scan:
        """Aliases, references and strings of the candidate, computed once for every check."""
        if not self._scan:
            self._scan.append(Scan(self.tree, self.source))
        return self._scan[0]


CheckFn = Callable[[CheckInput], list[Finding]]


@dataclass(frozen=True)
class StaticCheck:
    name: str
    severity: Severity
    kind: FailureKind
    """The failure kind reported when a `reject` check finds something."""
    doc: str
    fn: CheckFn
    why: str = ""
    """Why the rule exists and what to do instead: with `doc`, what the agents are told before
    they write (`agent_rules`). Every check has one (tests/context/test_rules_in_prompts.py)."""

    def prompt_text(self) -> str:
        """The rule as the agents' prompts state it: name, what it forbids, why."""
        head = f"static check `{self.name}`" + (" (a warning, never a rejection)" if self.severity == "warn" else "")
        return f"{head}: {self.doc}" + (f" Why: {self.why}." if self.why else "")


def _top_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node  # type: ignore[return-value]
    return None


def _check_model_new(ci: CheckInput) -> list[Finding]:
    cls = _top_class(ci.tree, "ModelNew")
    if cls is None:
        return [Finding("model_new", f"{ci.filename} defines no top-level `class ModelNew`")]
    if _method(cls, "forward") is None and not cls.bases:
        return [Finding("model_new", "`ModelNew` defines no `forward` method", cls.lineno)]
    return []


def _arity(fn: ast.FunctionDef) -> tuple[int, int | None]:
    """(required positional count, max positional count or None if *args), self excluded."""
    a = fn.args
    names = [*a.posonlyargs, *a.args][1:]
    required = len(names) - len(a.defaults)
    return max(required, 0), (None if a.vararg else len(names))


def _required_kwonly(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    return {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None}


def _compatible(ref: ast.FunctionDef, new: ast.FunctionDef) -> bool:
    rr, rm = _arity(ref)
    nr, nm = _arity(new)
    # ModelNew must accept every call Model accepts: at least as many params, no more required.
    accepts_max = nm is None or (rm is not None and nm >= rm)
    return nr <= rr and accepts_max and _required_kwonly(new) <= _required_kwonly(ref)


def _check_signatures(ci: CheckInput) -> list[Finding]:
    new, ref = _top_class(ci.tree, "ModelNew"), _top_class(ci.problem_tree, "Model")
    if new is None or ref is None:
        return []
    findings = []
    for meth in ("__init__", "forward"):
        rf, nf = _method(ref, meth), _method(new, meth)
        if rf is None or nf is None or _compatible(rf, nf):
            continue
        findings.append(
            Finding(
                "signatures",
                f"ModelNew.{meth}({_params(nf)}) cannot be called like Model.{meth}({_params(rf)})",
                nf.lineno,
            )
        )
    return findings


def _params(fn: ast.FunctionDef) -> str:
    a = fn.args
    names = [x.arg for x in [*a.posonlyargs, *a.args][1:]]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    return ", ".join(names)


def _integrity(name: str, severity: Severity, doc: str, fn: Callable[[Scan], list[ic.Hit]],
               why: str = "") -> StaticCheck:
    def run(ci: CheckInput) -> list[Finding]:
        return [Finding(name, msg, line) for line, msg in fn(ci.scan)]

    return StaticCheck(name, severity, "rejected", doc, run, why)


REGISTRY: tuple[StaticCheck, ...] = (
    StaticCheck(
        "model_new",
        "reject",
        "malformed",
        "The candidate defines a top-level `class ModelNew` with a `forward` method.",
        _check_model_new,
        "the harness builds and calls `ModelNew` in place of the reference `Model`",
    ),
    StaticCheck(
        "signatures",
        "reject",
        "malformed",
        "`ModelNew.__init__` and `forward` accept the same arguments as `Model`'s.",
        _check_signatures,
        "the harness calls `ModelNew(*get_init_inputs())` and `forward(*get_inputs())` as it calls "
        "`Model`; keep every argument, even one the design does not need",
    ),
    _integrity("reference_access", "reject",
               "No use of `Model`, `get_inputs`, the reference or harness modules (by name or in a "
               "string), stack frames, debuggers, tracers or profilers, sys.modules or dotted-name "
               "resolvers, gc object walks or `__subclasses__`.", ic.reference_access,
               R.REFERENCE_ACCESS.why),
    _integrity("dynamic_code", "reject",
               "No exec/eval/compile/__import__/importlib, computed getattr/setattr, globals()/"
               "vars()/locals()/__dict__, code objects, TorchScript source strings, ctypes/cffi, "
               "dlopen or Python C-API calls.",
               ic.dynamic_code, R.DYNAMIC_CODE.why),
    _integrity("monkey_patch", "reject",
               "No assignment, del or setattr into imported modules, classes or builtins, and no "
               "global hooks (settrace, module hooks, aten overrides).", ic.monkey_patch,
               R.MONKEY_PATCH.why),
    _integrity("threads", "reject",
               "No threads, processes, async tasks or signals the design starts itself: in Python "
               "threading, multiprocessing, concurrent.futures, asyncio, subprocess, signal, "
               "torch.jit.fork; in C++ std::thread, std::async, pthreads, torch's thread pools (at::launch), fork/exec/system/popen. "
               "Allowed: `at::parallel_for`, OpenMP (`#pragma omp parallel for`) and atomics, whose "
               "work ends inside the call.", ic.threads,
               R.THREADS.why),
    _integrity("streams", "reject",
               "No side streams or CUDA graphs (Python or C++); the current stream is fine.",
               ic.streams, R.STREAMS.why),
    _integrity("mutable_state", "reject",
               "No state kept between calls: in Python mutated module/class containers, global "
               "rebinding, caches (functools.lru_cache, ...), id(), a tensor's `.data_ptr()`, "
               "`._version` or storage; in C++ non-const static or global variables. A C++ "
               "extension's `x.data_ptr<float>()` to reach a tensor's memory is fine.",
               mutable_state, R.MUTABLE_STATE.why),
    _integrity("fake_tensor", "reject",
               "No Tensor subclasses, __torch_function__/__torch_dispatch__, custom __eq__/__bool__ "
               "or __class__ assignment.", ic.fake_tensor, R.FAKE_TENSOR.why),
    _integrity("io", "reject",
               "No files, sockets, shared memory, serialization or /dev/shm and /proc paths.",
               ic.io, R.IO.why),
    _integrity("global_flags", "reject",
               "No changes to torch.backends, default dtypes/devices, thread counts, RNG seeds, "
               "grad mode, compiler configs or the environment.", ic.global_flags,
               R.GLOBAL_FLAGS.why),
    _integrity("exception_fallback", "reject",
               "No except handlers, contextlib.suppress or suppressing __exit__ (try/finally is "
               "fine).", ic.exception_fallback,
               R.EXCEPTION_FALLBACK.why),
    _integrity("process_exit", "reject",
               "No sys.exit/os._exit/exit()/quit(), SystemExit, kill, abort or atexit.",
               ic.process_exit, R.PROCESS_EXIT.why),
    _integrity("precision", "warn",
               "Warns on fp16/bf16/fp8/TF32/fast-math; the tolerance decides.", ic.precision,
               R.PRECISION.why),
    _integrity("own_kernels", "reject",
               "Strict policy only: the candidate launches a CUDA `__global__` or Triton kernel of "
               "its own from `ModelNew.forward`.", own_kernels,
               "the strict policy credits only work done in kernels the design wrote; wrapping torch "
               "or library calls is rejected"),
)

OWN_KERNELS_CPU = _integrity(
    "own_kernels", "reject",
    "Strict policy on the CPU: the candidate calls a C++ function of its own (a load_inline source "
    "that loops over the data), or a CUDA/Triton kernel, from `ModelNew.forward`.", own_kernels_cpu,
    "the strict policy credits only work done in code the design wrote; wrapping torch or library "
    "calls is rejected")
"""The CPU device's `own_kernels`: there, code the candidate compiles itself is its kernel."""

DEVICE_DOCS: dict[tuple[str, str], str] = {
    ("threads", "cuda"): "No threads, processes, async tasks or signals the design starts itself: in "
                         "Python threading, multiprocessing, concurrent.futures, asyncio, subprocess, "
                         "signal, torch.jit.fork; in host C++ std::thread, std::async, pthreads, at::launch, "
                         "fork/exec/system/popen. Allowed: atomics in kernels.",
    ("precision", "cpu"): "Warns on fp16/bf16/fp8/fast-math; the tolerance decides.",
}
"""A check's rule as a device's run states it, where its words differ (`agent_rules`)."""

GPU_ONLY = frozenset({"streams"})
"""Checks whose rule a CPU run does not state (the check still runs: nothing it forbids can run
there)."""

STRICT_ONLY = frozenset({"own_kernels"})
DEFAULT_CHECKS: tuple[StaticCheck, ...] = tuple(c for c in REGISTRY if c.name not in STRICT_ONLY)
"""The `lenient` policy: every check except those only the `strict` policy adds."""

IntegrityPolicy = Literal["lenient", "strict"]


def checks_for_policy(policy: IntegrityPolicy, device: str = "cuda") -> tuple[StaticCheck, ...]:
    """`lenient`: DEFAULT_CHECKS; `strict`: every check, `own_kernels` included (its CPU
    variant when `device` is the CPU).

    Raises:
        ConfigError: an unknown policy.
    """
    if policy == "lenient":
        return DEFAULT_CHECKS
    if policy == "strict":
        if device == "cpu":
            return tuple(OWN_KERNELS_CPU if c.name == "own_kernels" else c for c in REGISTRY)
        return REGISTRY
    raise ConfigError(f"unknown integrity policy {policy!r}; known: ['lenient', 'strict']")


def agent_rules(policy: IntegrityPolicy, device: str | None = None) -> tuple[str, ...]:
    """Every check `policy` runs, as the agents' prompts state it (`StaticCheck.prompt_text`),
    in registry order: the same table the checks run from, so the two cannot drift apart. With
    a `device`, in its words (`DEVICE_DOCS`; a CPU run without the GPU-only rules); with none,
    a rule that differs by device (the strict policy's `own_kernels`) is stated for each.

    Raises:
        ConfigError: an unknown policy.
    """
    if device is not None:
        kind = "cpu" if device == "cpu" else "cuda"
        return tuple(replace(c, doc=DEVICE_DOCS.get((c.name, kind), c.doc)).prompt_text()
                     for c in checks_for_policy(policy, kind) if not (kind == "cpu" and c.name in GPU_ONLY))
    out: list[str] = []
    for c in checks_for_policy(policy, "cuda"):
        if c.name == OWN_KERNELS_CPU.name:
            out += [f"(on a GPU) {c.prompt_text()}", f"(on the CPU) {OWN_KERNELS_CPU.prompt_text()}"]
        else:
            out.append(c.prompt_text())
    return tuple(out)


def run_static_checks(
    problem: Problem,
    source: str,
    filename: str = "candidate.py",
    checks: Sequence[StaticCheck] = DEFAULT_CHECKS,
) -> ValidatorResult:
    """The `static_checks` validator: parse the candidate, then run every selected check."""
    try:
        tree = pysyntax.parse(source, filename=filename)
    except SyntaxError as e:
        return ValidatorResult(
            name="static_checks",
            outcome="failed",
            kind="malformed",
            reason=f"{filename}: syntax error at line {e.lineno}: {e.msg}",
            details={"line": e.lineno, "text": (e.text or "").rstrip()},
        )
    ci = CheckInput(filename, source, tree, pysyntax.parse(problem.source))
    rejects: list[tuple[StaticCheck, Finding]] = []
    warnings: list[dict[str, object]] = []
    for check in checks:
        for f in check.fn(ci):
            item = {"check": f.check, "message": f.message, "line": f.line}
            if check.severity == "reject":
                rejects.append((check, f))
            else:
                warnings.append(item)
    details: dict[str, object] = {"checks": [c.name for c in checks], "warnings": warnings}
    if not rejects:
        return ValidatorResult(name="static_checks", outcome="passed", details=details)
    details["rejections"] = [
        {"check": f.check, "message": f.message, "line": f.line} for _, f in rejects
    ]
    reason = "; ".join(  # each named by its check, as the worker's integrity checks are
        f"{f.check}: {f.message}" + (f" (line {f.line})" if f.line else "") for _, f in rejects
    )
    return ValidatorResult(
        name="static_checks", outcome="failed", kind=rejects[0][0].kind, reason=reason,
        details=details,
    )
