"""Owns the shapes stage's plan: which size constants of a problem are changed, and to what
(shrunk keeping their power-of-two alignment, and to an odd size), leaving alone those the
reference's own code reads.
"""

from __future__ import annotations

import symtable

from stratagem.core.problem import Problem

SHAPE_MIN = 16
"""Size constants below this (kernel sizes, strides, channel counts of 3) are left alone."""


INPUT_BUILDERS = frozenset({"get_inputs", "get_init_inputs"})


def read_by_the_model(source: str) -> set[str]:
    """Module-level (global) names read inside any function or class other than the input
    builders: the `Model` class and the helpers it calls. Parameters and locals that share a
    constant's name (`def __init__(self, dim)`) are not reads of the constant."""
    out: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        out.update(s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced())
        for child in table.get_children():
            walk(child)

    for child in symtable.symtable(source, "problem", "exec").get_children():
        if child.get_name() not in INPUT_BUILDERS:
            walk(child)
    return out


def shape_variants(problem: Problem) -> list[dict[str, int | float]]:
    """Size-constant overrides for the shapes stage: the problem's own, or two variants of
    every integer constant >= 16: shrunk to about 3/4 keeping its power-of-two alignment (up to
    16), and shrunk to an odd size near 3/4 (no power of two, no multiple of 8), so code
    hard-wired to the visible sizes or to their alignment fails.

    Constants the reference's own code reads (in `Model` or a helper, rather than through
    `get_inputs`/`get_init_inputs`) are left alone: the reference is itself wired to them, so a
    candidate, which cannot see the reference module's values, could never follow a change.
    """
    declared = problem.settings.get("shapes")
    if declared is False:
        return []
    if isinstance(declared, list):
        return [dict(v) for v in declared]
    variant: dict[str, int | float] = {}
    odd: dict[str, int | float] = {}
    wired = read_by_the_model(problem.source)
    for name, v in problem.size_constants.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < SHAPE_MIN or name in wired:
            continue
        align = 1
        while align < 16 and v % (align * 2) == 0:
            align *= 2
        new = max(align, (v * 3 // 4) // align * align)
        if new == v:
            new = v - align
        if new > 0:
            variant[name] = new
        unaligned = (v * 3 // 4) | 1  # odd: no power of two (above 1), no multiple of 8
        if unaligned == v:
            unaligned -= 2
        odd[name] = unaligned
    return [x for x in (variant, odd) if x]


