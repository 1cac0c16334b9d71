"""Owns what the agents are told of the PyTorch domain's rules: what a design may contain, each
integrity policy, the correctness rule in force and each validator of the graph, generated
from the tables the checks run from (`agent_rules`).
"""

from __future__ import annotations

from stratagem.config import EvaluationConfig
from stratagem.core.problem import Problem
from stratagem.domains.pytorch.graphs import validator_graph
from stratagem.domains.pytorch.settings import correctness_rule, integrity_policy, tolerances
from stratagem.domains.pytorch.settings import settings as pytorch_settings
from stratagem.domains.pytorch.shapes import shape_variants
from stratagem.domains.pytorch.static.checks import agent_rules as static_agent_rules

FILES_RULE = (
    "files: a design is one Python file, `candidate.py`, that defines `class ModelNew(nn.Module)`, a "
    "drop-in replacement of `Model` (the same `__init__` and `forward` arguments, the same outputs: "
    "type, dtype, shape, device); every helper is defined in it, native code is built from strings "
    "in it (`torch.utils.cpp_extension.load_inline`, Triton), and it imports only the standard "
    "library, torch, triton and numpy"
)
"""What a design may contain, as the agents are told (`agent_rules`)."""

DEVICE_POLICY_RULES: dict[tuple[str, str], str] = {
    ("lenient", "cpu"): "integrity policy `lenient`: any honest code counts: torch operators, vendor libraries "
                        "(oneDNN, MKL), C++ functions of your own (`load_inline`), algebraic simplifications that "
                        "compute the same function for every input",
    ("lenient", "cuda"): "integrity policy `lenient`: any honest code counts: torch operators, vendor libraries "
                         "(cuBLAS, cuDNN, CUTLASS), kernels of your own (CUDA, Triton), algebraic simplifications "
                         "that compute the same function for every input",
    ("strict", "cpu"): "integrity policy `strict`: the heavy work must run in code the design wrote itself (a "
                       "C++ function of its own that loops over the data): the static `own_kernels` check "
                       "requires one, and the `provenance` stage measures after timing that it does at least "
                       "half of the timed work",
    ("strict", "cuda"): "integrity policy `strict`: the heavy work must run in kernels the design wrote itself "
                        "(a CUDA `__global__` function, a Triton kernel): the static `own_kernels` check requires "
                        "one, and the `provenance` stage measures after timing that they do at least half of the "
                        "timed work",
}
"""Each integrity policy in a device's words, when the run's device is known (`agent_rules`)."""

POLICY_RULES: dict[str, str] = {
    "lenient": "integrity policy `lenient`: any honest code counts: torch operators, vendor libraries "
               "(cuBLAS, cuDNN, CUTLASS, oneDNN), kernels of your own (CUDA, Triton, C++), algebraic "
               "simplifications that compute the same function for every input",
    "strict": "integrity policy `strict`: the heavy work must run in kernels the design wrote itself (a "
              "CUDA `__global__` function, a Triton kernel, on the CPU a C++ function of its own that "
              "loops over the data): the static `own_kernels` check requires one, and the `provenance` "
              "stage measures after timing that they do at least half of the timed work",
}
"""Each integrity policy as the agents are told it (`agent_rules`); a test fails on a policy
without one."""

STAGE_RULES: dict[str, str] = {
    "static_checks": "stage `static_checks`: the static checks listed here, on the source alone, before "
                     "anything runs",
    "load": "stage `load`: `candidate.py` is imported in a fresh worker process and `ModelNew` built from "
            "`get_init_inputs()`; compiling (`load_inline`, Triton) counts against the compile limit, "
            "the rest against the run limit",
    "correctness": "stage `correctness`: the outputs are compared with the reference's on fresh random "
                   "inputs over several trials (seeds the design cannot know), with random non-initial "
                   "parameters loaded into both models (mapped by key, order or unique shape: keep the "
                   "reference's parameters) and on inputs scaled far beyond `get_inputs()`'s; inputs must "
                   "not be modified, and NaN and infinity must sit where the reference's do",
    "integrity": "stage `integrity`: calls on inputs refilled in place, a first call on poisoned memory "
                 "and repeated calls that must agree: every output is computed from the current inputs "
                 "in the call that returns it, and nothing the design starts outlives the call",
    "shapes": "stage `shapes`: the design is run and checked again with the problem's size constants "
              "changed{variants}: take sizes from the inputs, never hard-wire the visible sizes or their "
              "alignment",
    "timing": "stage `timing`: the design is timed against eager in alternating blocks in one worker "
              "(the paired ratio and its 95% interval); outputs of timed calls, drawn at random, are "
              "checked too",
    "roofline": "stage `roofline`: the roofline estimate is the work at the device's calibrated bandwidth "
                "and FLOP rate (for the precision the correctness rule admits), an estimate of the least "
                "time, not a measured limit, so an honest design may run somewhat under it; a time more "
                "than {margin} under it is rejected as impossible",
    "provenance": "stage `provenance` (strict policy): after timing, the design's own kernels must run in "
                  "every measured call and take at least half of their time (`OWN_TIME_FRACTION`); "
                  "disabling them must change the output, so a kernel on a token slice of the data, one "
                  "that runs only in early calls or a decoy beside a library call fails",
}
"""Each validator of the graph as the agents are told it (`agent_rules`), in the graph's order;
a test fails on a validator without one."""


_ROUNDS = {"cpu": "long reductions", "cuda": "TF32 convolutions or matmuls, long reductions",
           "auto": "TF32 convolutions or matmuls on a GPU, long reductions"}
"""Where a reference rounds, in a device's words (`correctness_rule_text`)."""


def _rounds(device: str) -> str:
    """`_ROUNDS` for a device setting or a slot's device (`cpu`, `cpu:1`, `cuda:0`, `auto`)."""
    return _ROUNDS["cuda" if device.startswith("cuda") else "auto" if device == "auto" else "cpu"]


_DOWNGRADES = {"cpu": "fp16 or bf16 autocast or casts where the reference ran float32",
               "cuda": "fp16 or bf16 autocast or casts where the reference ran float32 or TF32, a Triton `tl.dot` "
                       "in TF32 (its default on float32; pass input_precision=\"ieee\") where the reference's "
                       "matmuls ran exact float32"}
_DOWNGRADES["auto"] = _DOWNGRADES["cuda"] + " (on a GPU)"
"""What a precision downgrade looks like, in a device's words (`correctness_rule_text`)."""


def _downgrades(device: str) -> str:
    return _DOWNGRADES["cuda" if device.startswith("cuda") else "auto" if device == "auto" else "cpu"]


def correctness_rule_text(problem: Problem, cfg: EvaluationConfig) -> str:
    """The correctness rule in force, as the agents are told it."""
    rule = correctness_rule(problem, cfg)
    if rule["mode"] == "calibrated":
        return ("correctness rule `calibrated`: each floating output's largest error against a float64 "
                f"copy of the reference may be at most {float(rule['factor']):g} times eager's own largest "
                f"error against it (plus {float(rule['ulp_floor']):g} ulp of the output's largest value"
                + (f" and {float(rule['atol_floor']):g}" if float(rule["atol_floor"]) else "")
                + "): lower precision passes only where it is measured to be accurate enough")
    tol = "; ".join(f"{dtype} atol={t['atol']:g}, rtol={t['rtol']:g}" for dtype, t in sorted(tolerances(problem, cfg).items()))
    if rule["mode"] == "reference":
        return ("correctness rule `reference`: compute at the precision the reference ran at or higher: a "
                f"design seen computing below it ({_downgrades(cfg.device)}) is a precision downgrade and fails "
                "whatever its error. Then "
                f"every output element within atol + rtol x |reference| of the reference's ({tol}); where the "
                f"reference itself rounds ({_rounds(cfg.device)}), an output close enough to a float64 run of the "
                f"reference passes too: within {float(rule['same_precision_factor']):g} times the reference's own "
                "error when your design was seen computing at its precision (torch operators, torch.compile, "
                f"Triton kernels), {float(rule['factor']):g} times when it could not be (your own CUDA code)")
    return ("correctness rule `fixed`: every output element within atol + rtol x |reference| of the "
            f"reference's ({tol})")


def agent_rules(problem: Problem, cfg: EvaluationConfig) -> tuple[str, ...]:
    """Every rule the harness enforces on a design of `problem`, one line each, generated from
    the tables the checks run from: what a design may contain, the integrity policy, the
    correctness rule, the static checks of the policy (`static.agent_rules`) and each stage of
    the problem's validator graph, in order; in the words of the device `cfg.device` names (a
    CPU run's rules say nothing of GPUs, a GPU run's nothing of the CPU), or of both for `auto`."""
    policy = integrity_policy(problem, cfg)
    device = "cpu" if cfg.device == "cpu" else "cuda" if cfg.device.startswith("cuda") else None
    graph = validator_graph(problem, policy)
    variants = shape_variants(problem)
    shown = "; ".join(", ".join(f"{k}={v}" for k, v in var.items()) for var in variants)
    stages = []
    for name in graph.names:
        text = STAGE_RULES[name]
        if name == "shapes":
            if not variants:
                continue
            alone = ", and each alone made a little larger" if any(len(v) > 1 for v in variants) else ""
            text = text.format(variants=f" ({shown}{alone})")
        if name == "roofline":
            text = text.format(margin=f"{pytorch_settings(cfg).roofline_margin:.0%}")
        stages.append(text)
    statics = static_agent_rules(policy, device) if "static_checks" in graph.names else ()
    said = DEVICE_POLICY_RULES[policy, device] if device is not None else POLICY_RULES[policy]
    return (FILES_RULE, said, correctness_rule_text(problem, cfg), *statics, *stages)


