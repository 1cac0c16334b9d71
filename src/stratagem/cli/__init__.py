"""Owns the command line: a thin typer app; every command calls a library function.

Exit codes: 0 a verdict was reached (valid or invalid) · 1 the harness or the problem failed
(status `error`) · 2 usage or configuration error (bad options, malformed problem file).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence

import typer

from stratagem.cli.common import app

__all__ = ["COMMANDS", "main", "register", "run_app"]

COMMANDS = {"bench": "bench", "confirm": "confirm", "mcp": "mcp", "redteam": "redteam",
            **dict.fromkeys(("eval", "baseline", "calibrate", "audit", "worker"), "evaluate"),
            **dict.fromkeys(("report", "serve", "analyze"), "report"),
            **dict.fromkeys(("run", "resume", "show", "export", "compare"), "search")}
"""Each command's module under `stratagem.cli`, which registers it on `app`."""


def register(argv: Sequence[str]) -> None:
    """Register the command `argv` names (its module only: `stratagem eval` loads no search
    command's imports), or every command where it names none we know (help, a typo)."""
    name = next((a for a in argv if not a.startswith("-")), None)
    for module in sorted({COMMANDS[name]} if name in COMMANDS else set(COMMANDS.values())):
        importlib.import_module(f"stratagem.cli.{module}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = list(argv) if argv is not None else sys.argv[1:]
    register(args)
    try:
        rv = app(args=args, prog_name="stratagem", standalone_mode=False)
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
