"""Owns taking a design away: its source with a provenance header, and a helper that loads
the reference's weights into it.

`stratagem export RUN_DIR [DESIGN]` and the run's `best/candidate.py` both write
`exported_source`: a comment block saying which problem, run, design, speedups (the same
paired numbers as everywhere else), device and stratagem version the file came from, then the
design's source unchanged, then `load_reference_state_dict(model, state_dict)`. A design's
module layout often differs from the reference's (a `recipes` design holds the reference as
`self.model`, so its keys are `model.weight` where the reference has `weight`); the helper
places each of the reference's tensors by the rules the harness's randomised-parameters trial
uses (`domains/pytorch/params.py`): the same key, else the one key ending in `.KEY`, else the
same shapes in the same order, else the one tensor of that shape.
"""

from __future__ import annotations

import time
from pathlib import Path

import stratagem
from stratagem.core.search import DesignView
from stratagem.errors import StoreError

LOAD_HELPER = '''

# -- added by stratagem export: load the reference Model's weights into this design ------------

def load_reference_state_dict(model, state_dict):
    """Load `state_dict` (the reference `Model`'s `state_dict()`, e.g. trained weights) into
    `model` (a `ModelNew`), whose keys may differ: each tensor goes to the same key, else the one
    key ending in `.KEY`, else by position when every shape agrees in order, else to the one
    tensor of its shape. Raises KeyError naming a tensor it cannot place."""
    own = model.state_dict()
    targets = {}
    free = [k for k in own if k not in state_dict]
    for key, value in state_dict.items():
        if key in own:
            targets[key] = key
            continue
        ends = [k for k in free if k.endswith("." + key)]
        if len(ends) == 1:
            targets[key] = ends[0]
            free.remove(ends[0])
    rest = [k for k in state_dict if k not in targets]
    if rest:
        shapes = [tuple(state_dict[k].shape) for k in rest]
        if [tuple(own[k].shape) for k in free] == shapes:
            targets.update(zip(rest, free))
        else:
            for key in rest:
                same = [k for k in free if tuple(own[k].shape) == tuple(state_dict[key].shape)]
                if len(same) != 1:
                    raise KeyError(f"cannot place the reference's {key} ({tuple(state_dict[key].shape)}) in this design")
                targets[key] = same[0]
                free.remove(same[0])
    model.load_state_dict({**own, **{targets[k]: v for k, v in state_dict.items()}})
    return targets
'''


def provenance_header(view: DesignView, problem: str, run_dir: Path, device: str | None,
                      reference_ms: dict[str, float | None] | None = None) -> str:
    """The comment block an exported design starts with."""
    lines = [
        f"stratagem {stratagem.__version__}: design {view.id} of problem {problem}",
        f"run: {run_dir} · iteration {view.iteration if view.iteration is not None else '-'} · "
        f"author {view.author or '-'} · strategy {view.strategy or '-'}",
        f"status: {view.status}" + ("" if view.status == "valid" else " (not a verified design)"),
        f"speedup vs eager (paired, 95% interval): {view.speedup_text()} · vs torch.compile: "
        f"{view.compile_text()}",
        f"device: {device or '-'} · runtime {view.runtime_ms:.4f} ms" if view.runtime_ms else f"device: {device or '-'}",
    ]
    if reference_ms:
        lines.append("reference: " + ", ".join(f"{k} {v:.4f} ms" for k, v in reference_ms.items() if v))
    lines.append(f"exported {time.strftime('%Y-%m-%d %H:%M:%S')}; load the reference's weights with "
                 "load_reference_state_dict(model, state_dict) at the end of this file")
    return "".join(f"# {ln}\n" for ln in lines) + "\n"


def exported_source(view: DesignView, problem: str, run_dir: Path, device: str | None,
                    reference_ms: dict[str, float | None] | None = None) -> str:
    """Header, the design's source unchanged, and the weight-loading helper."""
    return provenance_header(view, problem, run_dir, device, reference_ms) + view.source.rstrip("\n") + "\n" + LOAD_HELPER


def pick(views: list[DesignView], prefix: str | None, best: DesignView | None) -> DesignView:
    """The design `prefix` names (an id prefix), or the best one.

    Raises:
        StoreError: no design has that prefix, several do, or there is no best to default to.
    """
    if prefix is None:
        if best is None:
            raise StoreError("the run has no valid design to export; name one (`stratagem show RUN_DIR` lists them)")
        return best
    hits = [v for v in views if v.id.startswith(prefix)]
    if not hits:
        raise StoreError(f"no design of this run has an id starting with {prefix!r} (`stratagem show RUN_DIR` lists them)")
    if len(hits) > 1:
        raise StoreError(f"{len(hits)} designs start with {prefix!r}: give more of the id")
    return hits[0]
