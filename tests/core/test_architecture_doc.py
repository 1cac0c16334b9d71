"""docs/architecture.md's module map holds: one row per module of src/stratagem (a package's
`__init__.py` that holds only its docstring is a folder, not a module), each row naming a
module that exists, and every module path a row cites (`x/y.py`) a file there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import stratagem

PKG = Path(stratagem.__file__).resolve().parent
DOC = PKG.parents[1] / "docs" / "architecture.md"
ROW = re.compile(r"^\| `([\w/]+\.py)` \|(.*)\|\s*$")


def _rows() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for line in DOC.read_text(encoding="utf-8").splitlines()
            if (m := ROW.match(line))]


def _only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return path.name == "__init__.py" and len(body) <= 1 and all(isinstance(n, ast.Expr) for n in body)


def test_every_module_has_one_row_and_every_row_a_module() -> None:
    rows = [path for path, _ in _rows()]
    files = [p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts]
    modules = sorted(str(p.relative_to(PKG)) for p in files if not _only_a_docstring(p))
    assert sorted(set(rows)) == sorted(rows), "a module with two rows"
    assert sorted(set(modules) - set(rows)) == [], "modules without a row in docs/architecture.md"
    assert sorted(set(rows) - {str(p.relative_to(PKG)) for p in files}) == [], "rows naming no module"


def test_the_module_paths_a_row_cites_exist() -> None:
    """A row's `a/b.py` names a file under src/stratagem (or, written from its own folder, one
    beside the row's module or under its domain)."""
    missing = []
    for path, text in _rows():
        here = PKG / Path(path).parent
        for cited in re.findall(r"`([\w/]+\.py)`", text):
            places = [PKG / cited, here / cited, *(PKG / "domains" / d / cited for d in ("pytorch", "command"))]
            if not any(p.is_file() for p in places):
                missing.append(f"{path}: {cited}")
    assert not missing, missing
