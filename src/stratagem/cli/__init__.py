"""Owns the command line: a thin typer app; every command calls a library function.

Exit codes: 0 a verdict was reached (valid or invalid) · 1 the harness or the problem failed
(status `error`) · 2 usage or configuration error (bad options, malformed problem file).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import typer

from stratagem.cli import bench, confirm, evaluate, mcp, redteam, report, search  # noqa: F401 - registers the commands
from stratagem.cli.common import app

__all__ = ["app", "main", "run_app"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        rv = app(args=list(argv) if argv is not None else None, prog_name="stratagem", standalone_mode=False)
    except typer.Exit as e:
        return int(e.exit_code)
    except SystemExit as e:  # pragma: no cover - click may still raise it
        return int(e.code or 0)
    except typer.Abort:
        return 130
    except typer.TyperException as e:  # usage errors: bad or missing options and arguments
        show = getattr(e, "show", None)
        if callable(show):
            show()
        return int(getattr(e, "exit_code", 2))
    return rv if isinstance(rv, int) else 0


def run_app() -> None:
    sys.exit(main())
