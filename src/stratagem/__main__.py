"""`python -m stratagem`: the same as the `stratagem` command."""

from stratagem.cli import run_app

run_app()
