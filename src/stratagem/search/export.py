"""Owns taking a design away: its source with a provenance header, and a helper that loads
the reference's weights into it.

`stratagem export RUN_DIR [DESIGN]` and the run's `best/candidate.py` both write
`exported_source`: a comment block saying which problem, run, design, speedups (the same
paired numbers as everywhere else, each with its interval, in the words of the problem's
domain; the one over the baseline the domain sets beside the reference chained via the
reference and said in words: faster, on par, slower), device and stratagem version
the file came from, then the design's source unchanged, then what the problem's domain
appends (PyTorch: `load_reference_state_dict(model, state_dict)`,
`domains/pytorch/weights.py`). A design's
module layout often differs from the reference's (a `recipes` design holds the reference as
`self.model`, so its keys are `model.weight` where the reference has `weight`); the helper
places each of the reference's tensors by the rules the harness's randomised-parameters trial
uses (`domains/pytorch/worker/params.py`): the same key, else the one key ending in `.KEY`, else the
same shapes in the same order, else the one tensor of that shape.
"""

from __future__ import annotations

import time
from pathlib import Path

import stratagem
from stratagem.core.search import DesignView
from stratagem.domains import DEFAULT, get_domain
from stratagem.domains.base import BaselineNames, baseline_names
from stratagem.errors import StoreError
from stratagem.search.numbers import clip, not_ranked_because, passed, second_sentence
from stratagem.store.records import REFERENCE_KEY


def provenance_header(view: DesignView, problem: str, run_dir: Path, device: str | None,
                      reference_ms: dict[str, float | None] | None = None, footer_note: str = "",
                      names: BaselineNames | None = None) -> str:
    """The comment block an exported design starts with (`names`: the problem's domain's words;
    None: the default domain's)."""
    n = names or baseline_names(get_domain(DEFAULT))
    second = [second_sentence(view, n) or f"vs {n.compared_text}: not measured"] if n.compared else []
    lines = [
        f"stratagem {stratagem.__version__}: design {view.id} of problem {problem}",
        f"run: {run_dir} · iteration {view.iteration if view.iteration is not None else '-'} · "
        f"author {view.author or '-'} · strategy {view.strategy or '-'}",
        f"status: {_status(view)}",
        *confirmed_lines(view, n),
        f"speedup vs {n.reference} (paired, 95% interval){' at search time' if view.confirmed else ''}: "
        f"{view.speedup_text()}",
        *second,
        f"device: {device or '-'} · runtime {view.runtime_ms:.4f} ms" if view.runtime_ms else f"device: {device or '-'}",
    ]
    if reference_ms:
        lines.append("reference: " + ", ".join(f"{n.reference if k == REFERENCE_KEY else k} {v:.4f} ms"
                                               for k, v in reference_ms.items() if v))
    lines.append(f"exported {time.strftime('%Y-%m-%d %H:%M:%S')}" + (f"; {footer_note}" if footer_note else ""))
    return "".join(f"# {ln}\n" for ln in lines) + "\n"


def confirmed_lines(view: DesignView, names: BaselineNames | None = None) -> list[str]:
    """The confirmation round's numbers of `view` (the headline when it was confirmed), in the
    words of `names` (None: the default domain's)."""
    c = view.confirmed
    if c is None or c.vs_reference is None:
        return []
    n = names or baseline_names(get_domain(DEFAULT))
    r = c.vs_reference
    out = [f"confirmed vs {n.reference}: {r.ratio:.3g}x [{r.low:.3g}, {r.high:.3g}] (re-timed with the other "
           f"contenders in {len(c.block_medians)} independent workers, interval across them; "
           f"rank {c.rank if c.rank is not None else '-'} of the round{', tied' if c.tied_with_best else ''})"]
    if c.vs_compared is not None:
        k = c.vs_compared
        out.append(f"confirmed vs {n.compared_text}: {k.ratio:.3g}x [{k.low:.3g}, {k.high:.3g}] (timed in the same workers)")
    if c.warm is not None:
        out.append(f"in a warm loop over one input set: {c.warm.ratio:.3g}x [{c.warm.low:.3g}, {c.warm.high:.3g}] vs {n.reference}")
    return out


def _status(view: DesignView) -> str:
    """The design's status as every view counts it (`search/numbers.py`)."""
    if not passed(view):
        return f"{view.status} (did not pass: not a verified design)"
    why = not_ranked_because(view)
    return f"valid, not ranked: {clip(why, 160)}" if why else "valid"


def exported_source(view: DesignView, problem: str, run_dir: Path, device: str | None,
                    reference_ms: dict[str, float | None] | None = None, domain: str = "pytorch") -> str:
    """Header, the design's source unchanged, and what the problem's domain appends to a design
    taken away (PyTorch: the weight-loading helper)."""
    d = get_domain(domain)
    return (provenance_header(view, problem, run_dir, device, reference_ms, d.export_note, baseline_names(d))
            + view.source.rstrip("\n") + "\n" + d.export_footer)


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
