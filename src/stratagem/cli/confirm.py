"""Owns `stratagem confirm`: a confirmation round on a run, and its table."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from stratagem.cli.common import DeviceOpt, JsonOpt, app, fail, wide_console
from stratagem.core.text import clip
from stratagem.domains.base import BaselineNames
from stratagem.errors import ConfigError, StratagemError

if TYPE_CHECKING:
    from stratagem.core.search import DesignView


@app.command("confirm")
def confirm_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory.")],
    top: Annotated[int | None, typer.Option("--top", metavar="K", min=1,
                                            help="Re-time this many of the best designs (default: the "
                                                 "run's [search] confirm_top, 5 where it is 0), plus any "
                                                 "whose interval overlaps the best's.")] = None,
    blocks: Annotated[int | None, typer.Option("--blocks", metavar="B", min=2,
                                               help="Independent worker processes (default 3).")] = None,
    device: DeviceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-time eager, torch.compile and the top designs of a run together, interleaved, in
    several fresh workers; rank by ratios whose intervals hold the spread between them, and
    make that the run's headline (`show`, `export`, `report`)."""
    from stratagem.search.api import confirm_stored_run

    console = wide_console(stderr=as_json)
    try:
        body = asyncio.run(confirm_stored_run(run_dir, top, blocks, on_progress=lambda t: console.print(t),
                                              device=device))
    except ConfigError as e:
        fail(console, e, as_json, 2)
    except StratagemError as e:
        fail(console, e, as_json, 1)
    if body is None:
        fail(console, StratagemError(f"{run_dir} has no ranked design to confirm"), as_json, 1)
    assert body is not None
    if as_json:
        print(json.dumps(body))
        return
    from stratagem.search.api import show_run

    r = show_run(run_dir)
    print_confirmed(console, body, r.names, r.views)


def _r(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    return f"{d['ratio']:.2f}x [{d['low']:.2f}, {d['high']:.2f}]"


def confirmed_table(body: dict[str, Any], n: BaselineNames, views: Sequence[DesignView]) -> Table:
    """The round's designs: rank (tied with the best: =1), confirmed ratio over the reference
    with its interval, over the compared baseline (a domain with one), a warm loop's ratio, and
    the search-time figure beside it; in the words of `n` (the run's domain's). A design's
    ratios are `ratios_of` its view in `views` (the run's), as the leaderboard and the report
    write them (a design that is the compared baseline's own recipe: `itself`)."""
    from stratagem.search.headline import ratios_of
    from stratagem.search.numbers import rank_marks

    by_id = {v.id: v for v in views}
    t = Table(title=f"confirmed: {body.get('blocks')} independent blocks, interleaved", title_justify="left")
    second = (f"vs {n.compared}",) if n.compared else ()
    for col in ("#", "design", f"confirmed vs {n.reference}", *second, "warm loop", "search time"):
        t.add_column(col, no_wrap=col in ("#", "design"))
    designs = list(body.get("designs") or ())
    for mark, d in zip(rank_marks([d.get("rank") for d in designs]), designs, strict=True):
        agrees = d.get("search_agrees")
        search = _r(d.get("search")) + ("" if agrees is None else (" (agrees)" if agrees else " (differs)"))
        v = by_id.get(str(d["design_id"]))
        x = ratios_of(v, n) if v is not None else None
        ref = x.reference.number() if x is not None else _r(d.get(f"vs_{n.key}"))
        compared = x.compared.number() if x is not None and x.compared is not None else _r(d.get(f"vs_{n.compared}"))
        t.add_row(mark, str(d["design_id"])[:10], ref if d.get(f"vs_{n.key}") or not d.get("error") else d["error"][:40],
                  *((compared,) if second else ()), _r(d.get("warm")), search)
    return t


def confirmed_summary(body: dict[str, Any], key: str) -> str:
    """What the round says beyond its table (`key`: the reference's key in its records)."""
    designs = [d for d in body.get("designs") or () if d.get(f"vs_{key}")]
    tied = [d for d in designs if d.get("tied_with_best")]
    compared = [d for d in designs if d.get("search_agrees") is not None]
    lines = []
    if len(tied) > 1:
        lines.append(f"{len(tied)} designs are tied with the best (their intervals overlap): not ranked apart.")
    if compared:
        n = sum(bool(d["search_agrees"]) for d in compared)
        lines.append(f"the search-time figure agreed with the confirmed one (their intervals overlap) for {n} of "
                     f"{len(compared)} designs.")
    lines += [f"{str(d['design_id'])[:10]}: confirmed from {d.get('blocks')} of {body.get('blocks')} blocks; "
              f"the others failed it: {clip(str(d['error']), 160)}" for d in designs if d.get("error")]
    lines.append("the confirmed ratios time every call on fresh inputs, as the search does; 'warm loop' "
                 "reuses one input set, as a benchmark loop would.")
    return "\n".join(lines)


def print_confirmed(console: Console, body: dict[str, Any], names: BaselineNames,
                    views: Sequence[DesignView]) -> None:
    """The round's table and what it means (`names`: the run's domain's words; `views`: the
    run's designs)."""
    console.print(confirmed_table(body, names, views))
    console.print(confirmed_summary(body, names.key), highlight=False)
