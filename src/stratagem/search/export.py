"""Owns taking a design away: its own files with a provenance header, and a helper that loads
the reference's weights into it.

`stratagem export RUN_DIR [DESIGN] [--out PATH]` and the run's `best/` both write
`exported_files`: the design's own files, ready to build, one of them headed by a comment block
in its own syntax (`//` for C/C++/CUDA, `#` for Python and shell; `PROVENANCE.txt` beside them
when none takes a comment) saying which problem, run, design, speedups (the headline's numbers,
`search/headline.py`, in the words of the problem's domain), device and stratagem version the
files came from, then the design's files unchanged, then what the problem's domain appends
(PyTorch: `load_reference_state_dict(model, state_dict)`, `domains/pytorch/weights.py`). A
design of several files is written into a directory (`--out DIR`); on stdout it is one text,
each file under its `=== stratagem file: NAME ===` line. A design's
A design's
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
from stratagem.core.design import files_text, text_files, with_header
from stratagem.core.search import DesignView
from stratagem.core.text import clip
from stratagem.domains import get_domain
from stratagem.domains.base import BaselineNames
from stratagem.errors import StoreError
from stratagem.search.headline import ratios_of
from stratagem.search.numbers import not_ranked_because, passed, times_text

PROVENANCE_FILE = "PROVENANCE.txt"
"""Where the header goes when no file of an exported design takes a comment."""


def provenance_lines(view: DesignView, problem: str, run_dir: Path, device: str | None,
                     reference_ms: dict[str, float | None] | None = None, footer_note: str = "",
                     *, names: BaselineNames) -> list[str]:
    """The lines an exported design is headed by (`names`: the problem's domain's words): its
    ratios as every view says them (`search/headline.py`)."""
    n = names
    r = ratios_of(view, n)
    lines = [
        f"stratagem {stratagem.__version__}: design {view.id} of problem {problem}",
        f"run: {run_dir} · iteration {view.iteration if view.iteration is not None else '-'} · "
        f"author {view.author or '-'} · strategy {view.strategy or '-'}",
        f"status: {_status(view)}",
    ]
    c = view.confirmed
    if r.reference.confirmed and c is not None:
        lines.append(f"speedup vs {n.reference}: {r.reference.number()}, confirmed (re-timed with the other "
                     f"contenders in {len(c.block_medians)} independent workers, interval across them; rank "
                     f"{c.rank if c.rank is not None else '-'} of the round{', tied' if c.tied_with_best else ''}); "
                     f"search time: {r.search.number()}")
    else:
        lines.append(f"speedup vs {n.reference} (paired, 95% interval): {r.reference.number()}")
    if r.compared is not None:
        lines.append(r.compared.sentence())
    if c is not None and c.warm is not None:
        lines.append(f"in a warm loop over one input set: {c.warm.ratio:.3g}x [{c.warm.low:.3g}, {c.warm.high:.3g}] "
                     f"vs {n.reference}")
    lines.append(f"device: {device or '-'} · runtime {view.runtime_ms:.4f} ms" if view.runtime_ms
                 else f"device: {device or '-'}")
    if reference_ms and (times := times_text(reference_ms, n)):
        lines.append(times)
    lines.append(f"exported {time.strftime('%Y-%m-%d %H:%M:%S')}" + (f"; {footer_note}" if footer_note else ""))
    return lines


def _status(view: DesignView) -> str:
    """The design's status as every view counts it (`search/numbers.py`)."""
    if not passed(view):
        return f"{view.status} (did not pass: not a verified design)"
    why = not_ranked_because(view)
    return f"valid, not ranked: {clip(why, 160)}" if why else "valid"


def headed_files(files: dict[str, str], main: str, lines: list[str]) -> dict[str, str]:
    """`files` with `lines` heading one of them in its own comment syntax (`main` first, else
    the first that takes a comment); none does: the lines in `PROVENANCE.txt` beside them."""
    for name in [main, *sorted(files)]:
        if name in files and (headed := with_header(name, files[name], lines)) is not None:
            return {**files, name: headed}
    return {**files, PROVENANCE_FILE: "".join(ln + "\n" for ln in lines)}


def exported_files(view: DesignView, problem: str, run_dir: Path, device: str | None,
                   reference_ms: dict[str, float | None] | None, domain: str, main: str) -> dict[str, str]:
    """A design taken away: its own files, ready to build, one of them headed by where it came
    from, and what the problem's domain appends to its main file (PyTorch: the weight-loading
    helper). `main`: the domain's main file for the problem (`Domain.main_file`)."""
    d = get_domain(domain)
    files = text_files(view.source, main)
    if d.export is not None and main in files:
        files[main] = files[main].rstrip("\n") + "\n" + d.export.footer
    return headed_files(files, main, provenance_lines(view, problem, run_dir, device, reference_ms,
                                                      d.export.note if d.export is not None else "", names=d.names))


def exported_source(view: DesignView, problem: str, run_dir: Path, device: str | None,
                    reference_ms: dict[str, float | None] | None, domain: str, main: str) -> str:
    """`exported_files` as one text: the single file itself, or several each under its
    `=== stratagem file: NAME ===` line (`write_files` writes them apart)."""
    return files_text(exported_files(view, problem, run_dir, device, reference_ms, domain, main))


def write_files(files: dict[str, str], out: Path, directory: bool = False) -> list[Path]:
    """Write an export: a single file to `out` (into it, under its own name, when `out` is a
    directory or `directory` says it is one), several into the directory `out` (made as needed).
    Returns the paths written."""
    if len(files) == 1 and not directory and not out.is_dir():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(next(iter(files.values())), encoding="utf-8")
        return [out]
    written = []
    for name, text in sorted(files.items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


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
