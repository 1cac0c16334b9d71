"""Owns a suite directory's manifest (`suite.json`): the problems of a `stratagem bench`,
the options it runs with, and each problem's state. Written whole and atomically (a
temporary file renamed over it), so a kill leaves the previous state or the next one.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from stratagem.errors import ConfigError, StoreError

MANIFEST_NAME = "suite.json"
MANIFEST_VERSION = 1

ProblemStateName = Literal["pending", "running", "done", "failed", "skipped", "interrupted"]
"""`pending`: not started · `running`: started and not ended (a killed suite leaves this) ·
`done`: its run finished (never run again) · `failed`: stopped by an error (run again by
`--resume`) · `skipped`: the policy cannot search it (never run) · `interrupted`: stopped by
Ctrl-C or SIGTERM (resumed by `--resume`)."""

RUNS_DIR = "runs"
"""The folder of a suite directory holding each problem's run directory (`runs/KEY`)."""

FINAL_STATES: frozenset[str] = frozenset({"done", "skipped"})
"""States `--resume` leaves alone."""


@dataclass(frozen=True)
class ProblemEntry:
    """One problem of a suite and where its run is."""

    key: str
    """Unique within the suite; also the run directory's name under `runs/`."""
    path: str
    """The problem file or command problem directory in the user's checkout (absolute)."""
    run_dir: str
    """The problem's run directory, relative to the suite directory."""
    level: str | None = None
    """KernelBench's or PIKE's level (`1`, `3-pike`, `5`), when the layout has levels."""
    number: int | None = None
    """KernelBench's problem id (the file name's leading number), when it has one."""
    state: ProblemStateName = "pending"
    stop_reason: str | None = None
    """The run's stop reason (done), or why it failed or was skipped."""
    started_at: float | None = None
    """Unix time the problem's latest run (or resumption) started."""
    finished_at: float | None = None
    device: str | None = None
    """The device its latest run was given (`cuda:1`) when the suite spreads runs over several."""
    active_s: float = 0.0
    """Seconds its runs have run, summed over the suite's sessions (a resumption adds its own)."""


@dataclass(frozen=True)
class SuiteManifest:
    """A suite directory's record of itself."""

    source: str
    """The suite's path as given (a KernelBench or PIKE checkout, or a folder of problems)."""
    problems: tuple[ProblemEntry, ...]
    config: dict[str, Any]
    """The whole StratagemConfig as JSON: every problem's run starts with it."""
    jobs: int | None = 1
    """Problems run at once (in one process, sharing one executor); None: as many as the
    executor has GPU slots, 1 on the CPU (`search/suite.py:default_jobs`)."""
    levels: tuple[str, ...] | None = None
    ids: tuple[int, ...] | None = None
    """`--problems`' ids, when given."""
    created_at: float = field(default_factory=time.time)
    version: int = MANIFEST_VERSION
    sessions: tuple[tuple[float, float], ...] = ()
    """Each `bench` (or `bench --resume`) that ran problems: its start and its latest change
    (Unix seconds); the suite's wall time is their sum, never the gaps between them."""

    def entry(self, key: str) -> ProblemEntry:
        for p in self.problems:
            if p.key == key:
                return p
        raise KeyError(key)

    def with_entry(self, entry: ProblemEntry) -> SuiteManifest:
        """This manifest with the problem of `entry.key` replaced by `entry`."""
        return replace(self, problems=tuple(entry if p.key == entry.key else p for p in self.problems))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.problems:
            out[p.state] = out.get(p.state, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["levels"] = list(self.levels) if self.levels is not None else None
        d["ids"] = list(self.ids) if self.ids is not None else None
        d["problems"] = [asdict(p) for p in self.problems]
        d["sessions"] = [list(x) for x in self.sessions]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SuiteManifest:
        try:
            return cls(source=str(d["source"]), problems=tuple(ProblemEntry(**p) for p in d["problems"]),
                       config=dict(d["config"]), jobs=None if d.get("jobs", 1) is None else int(d.get("jobs", 1)),
                       levels=tuple(d["levels"]) if d.get("levels") is not None else None,
                       ids=tuple(int(i) for i in d["ids"]) if d.get("ids") is not None else None,
                       created_at=float(d.get("created_at", 0.0)), version=int(d.get("version", 1)),
                       sessions=tuple((float(a), float(b)) for a, b in d.get("sessions") or ()))
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"the suite manifest is malformed ({type(e).__name__}: {e})") from e


def is_suite_dir(path: Path) -> bool:
    return (Path(path) / MANIFEST_NAME).is_file()


def read_manifest(suite_dir: Path) -> SuiteManifest:
    """The manifest of `suite_dir`.

    Raises:
        ConfigError: `suite_dir` is not a suite directory (a mistyped argument).
        StoreError: its manifest cannot be read.
    """
    path = Path(suite_dir) / MANIFEST_NAME
    if not path.is_file():
        raise ConfigError(f"{suite_dir}: not a suite directory (no {MANIFEST_NAME}; `stratagem bench SUITE_PATH` "
                          "makes one)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StoreError(f"{path}: cannot read the suite manifest ({e})") from e
    if not isinstance(data, dict):
        raise StoreError(f"{path}: the suite manifest is not a JSON object")
    return SuiteManifest.from_json(data)


def write_manifest(suite_dir: Path, manifest: SuiteManifest) -> Path:
    """Write the manifest atomically; returns its path."""
    suite_dir = Path(suite_dir)
    suite_dir.mkdir(parents=True, exist_ok=True)
    path = suite_dir / MANIFEST_NAME
    tmp = path.with_name(f".{MANIFEST_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return path
