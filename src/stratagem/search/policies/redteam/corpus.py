"""Owns the breach corpus: every design the harness accepted and the red-team audit showed wrong
or dishonest, written as a test fixture, and replaying a corpus through the ordinary evaluation
(`stratagem redteam --replay CORPUS`, docs/integrity.md).

A fixture is a folder `<problem>-<exploit>-<design id>/` holding the problem as it was
(`problem/`: its file, or a command problem's directory), the design's files (`design/`) and
`breach.json` (format 1): the attempt's class and what it said should catch it, the audit's
check and evidence (its failed validators' reasons and details), the design's id and speedup,
when and with which stratagem it was found. A breach found on one of the project's own
problems (under its `examples/` or `tests/`) is also written into the project's adversarial
corpus (`tests/adversarial/breaches/`), whose test replays it.

Replaying evaluates each fixture's design against its problem with the harness as it is now:
one accepted again (status `valid`) is a harness still fooled; one the harness cannot judge
(status `error`) is not known to be caught. Either fails the replay.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import stratagem
from stratagem.config import EvaluationConfig
from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.core.verdict import Verdict
from stratagem.domains import load_problem
from stratagem.errors import ConfigError, HarnessError, ProblemError
from stratagem.evaluation.api import make_evaluator

FORMAT = 1
RECORD = "breach.json"
ATTEMPTS_KEY = "redteam/attempts"
"""Where a red-team run's attempts are (the `redteam` policy's state `attempts`, in the run
database): every view of the run reads them from there."""
PROJECT_CORPUS = Path("tests") / "adversarial" / "breaches"
"""The project's own corpus of breaches, relative to its checkout."""


def _slug(text: str, n: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:n] or "x"


def project_root() -> Path | None:
    """The checkout this package runs from (an editable install), when it has the adversarial
    corpus; None for an installed package."""
    root = Path(stratagem.__file__).resolve().parents[2]
    return root if (root / "tests" / "adversarial").is_dir() else None


def _own_problem(problem: Problem, root: Path | None) -> bool:
    if root is None or not problem.path:
        return False
    p = Path(problem.path).resolve()
    return any(p.is_relative_to(root / d) for d in ("examples", "tests"))


def _audit_json(verdict: Verdict) -> list[dict[str, Any]]:
    return [{"validator": r.name, "kind": r.kind, "reason": r.reason,
             "details": json.loads(json.dumps(r.details, default=str))} for r in verdict.failures]


def write(corpus: Path, problem: Problem, files: Mapping[str, str], record: Mapping[str, Any],
          verdict: Verdict) -> Path:
    """Write one breach as a fixture under `corpus` (and into the project's corpus when the
    problem is one of the project's own); the fixture's folder.

    Raises:
        ConfigError: the corpus folder cannot be written (it names the folder).
    """
    folder = corpus / f"{_slug(problem.name)}-{_slug(str(record.get('exploit', 'breach')))}-{str(record['design_id'])[:10]}"
    try:
        _write_folder(folder, problem, files, record, verdict)
    except OSError as e:
        raise ConfigError(f"--corpus {corpus}: cannot write the breach fixture {folder.name} ({e})") from e
    root = project_root()
    if _own_problem(problem, root) and root is not None and not folder.resolve().is_relative_to(root / PROJECT_CORPUS):
        _write_folder(root / PROJECT_CORPUS / folder.name, problem, files, record, verdict)
    return folder


def _write_folder(folder: Path, problem: Problem, files: Mapping[str, str], record: Mapping[str, Any],
                  verdict: Verdict) -> None:
    (folder / "design").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        target = folder / "design" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    src = Path(problem.path) if problem.path else None
    if src is not None and src.is_dir():
        shutil.copytree(src, folder / "problem", dirs_exist_ok=True)
        problem_rel = "problem"
    else:
        name = src.name if src is not None else f"{_slug(problem.name)}.py"
        (folder / "problem").mkdir(exist_ok=True)
        (folder / "problem" / name).write_text(src.read_text(encoding="utf-8") if src is not None and src.is_file()
                                               else problem.source, encoding="utf-8")
        problem_rel = f"problem/{name}"
    body = {"format": FORMAT, "problem": problem_rel, "problem_name": problem.name, "domain": problem.domain,
            "design": "design", "files": sorted(files), **record, "audit": _audit_json(verdict),
            "found_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stratagem": stratagem.__version__}
    (folder / RECORD).write_text(json.dumps(body, indent=2, default=str) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Fixture:
    folder: Path
    record: dict[str, Any]

    @property
    def problem_path(self) -> Path:
        return self.folder / str(self.record["problem"])

    def design(self) -> Design:
        d = self.folder / str(self.record.get("design", "design"))
        files = {str(n): (d / str(n)).read_text(encoding="utf-8") for n in self.record.get("files", [])}
        return Design(files=files, provenance={"author": "redteam", "strategy": "replay",
                                               "fixture": self.folder.name})


def read(corpus: Path) -> list[Fixture]:
    """The fixtures under `corpus` (any depth), in name order.

    Raises:
        ConfigError: `corpus` is not a folder, holds no fixture, or a record is unreadable
            (naming the file).
    """
    if not corpus.is_dir():
        raise ConfigError(f"--replay {corpus}: not a folder (give the folder breaches were written to, "
                          "e.g. RUN_DIR/breaches or --corpus's)")
    out = []
    for rec in sorted(corpus.rglob(RECORD)):
        try:
            body = json.loads(rec.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--replay: {rec} is not a breach record ({e})") from e
        if not isinstance(body, dict) or body.get("format") != FORMAT or "problem" not in body:
            raise ConfigError(f"--replay: {rec} is not a breach record of format {FORMAT}")
        out.append(Fixture(rec.parent, body))
    if not out:
        raise ConfigError(f"--replay {corpus}: no breach fixture ({RECORD}) in it")
    return out


@dataclass(frozen=True)
class Replayed:
    """One fixture replayed through the harness as it is now."""

    name: str
    exploit: str
    status: str
    """The verdict's status now (`invalid`: caught)."""
    caught_by: str
    """The first failed validator and its reason (empty when accepted)."""

    @property
    def held(self) -> bool:
        """The harness rejects it (a verdict, `invalid`)."""
        return self.status == "invalid"


def replay(corpus: Path, cfg: EvaluationConfig) -> list[Replayed]:
    """Every fixture under `corpus` evaluated with the harness as `cfg` sets it, in name order.

    Raises:
        ConfigError: see `read`; or a domain section of `cfg` is invalid.
    """
    fixtures = read(corpus)
    evaluator = make_evaluator(cfg)

    async def one(f: Fixture) -> Replayed:
        exploit = str(f.record.get("exploit", "?"))
        try:
            problem = load_problem(f.problem_path)
            ev = await evaluator.evaluate(problem, f.design(), with_baseline=False)
        except (ProblemError, HarnessError, OSError) as e:
            return Replayed(f.folder.name, exploit, "error", f"could not be judged: {e}"[:300])
        first = ev.verdict.failures[0] if ev.verdict.failures else None
        return Replayed(f.folder.name, exploit, ev.verdict.status,
                        f"[{first.name}] {first.kind}: {first.reason}" if first else "")

    async def all_of() -> list[Replayed]:
        try:
            return [await one(f) for f in fixtures]
        finally:
            await evaluator.executor.aclose()

    return asyncio.run(all_of())
