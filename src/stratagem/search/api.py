"""Owns the library entry points behind `stratagem run`, `resume` and `show`: open or create
the run directory, choose the policy, build the evaluator, run the loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratagem.config import StratagemConfig, apply_overrides
from stratagem.core.objective import Objective
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, Policy
from stratagem.domains import get_domain, load_problem, parse_problem
from stratagem.errors import ConfigError, StoreError, StratagemError
from stratagem.evaluation.api import make_evaluator
from stratagem.evaluation.service import Evaluator
from stratagem.search import state as st
from stratagem.search.budget import Spend
from stratagem.search.loop import RunOutcome, RunView, SearchLoop
from stratagem.search.policies.redteam.corpus import ATTEMPTS_KEY
from stratagem.search.policies.registry import build_policy, policy_name, resolved_config, spec_for
from stratagem.search.session import RunSession
from stratagem.store.records import (
    DesignRecord,
    EvaluationRecord,
    IterationRecord,
    ProblemRecord,
    RunRecord,
)
from stratagem.store.sqlite import RunStore

if TYPE_CHECKING:
    from stratagem.search.policies.tune import Tuning


def default_run_dir(problem: Problem, root: Path = Path("runs")) -> Path:
    return root / f"{problem.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_policy(cfg: StratagemConfig, problem: Problem, evaluator: Evaluator, run_dir: Path) -> Policy:
    """The configured policy, from the registry (`auto` needs a model; without one and without
    a policy, the problem's domain names its default)."""
    return build_policy(cfg, problem, evaluator.on_gpu, run_dir / "work")


def check_policy(cfg: StratagemConfig, problem: Problem | None = None) -> None:
    """Raises ConfigError when the policy cannot run with this configuration (on `problem`;
    without one, an unnamed policy is left to each problem's domain)."""
    if problem is not None or cfg.policy is not None:
        spec_for(cfg, problem)


async def start_run(
    problem_path: str | Path, cfg: StratagemConfig, run_dir: Path | None = None, view: RunView | None = None
) -> RunOutcome:
    """Start a new run (or continue the run already in `run_dir` with the new settings)."""
    check_policy(cfg)
    problem = load_problem(problem_path)
    cfg = resolved_config(cfg, problem)
    run_dir = run_dir or cfg.search.run_dir
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(problem)
    # Everything that can be refused (device, policy, recipe names, models) is built before the
    # run directory is written, so a bad option leaves nothing behind.
    evaluator = make_evaluator(cfg.evaluation)
    claim_queue(evaluator, run_dir)
    policy = make_policy(cfg, problem, evaluator, run_dir)
    await preflight(policy)  # a model that cannot answer stops the run before it starts
    with RunStore.open(run_dir) as store:
        store.add_problem(problem)
        store.start_run(problem.id, policy_name(cfg, problem), cfg.model_dump(mode="json"))
        try:
            return await SearchLoop(RunSession(cfg, problem, store, evaluator, policy, view)).run()
        finally:
            await evaluator.executor.aclose()


async def resume_run(run_dir: str | Path, view: RunView | None = None,
                     overrides: dict[str, Any] | None = None) -> RunOutcome:
    """Continue a stopped or killed run from its database, with the settings it started with.

    Raises:
        StoreError: `run_dir` holds no run.
    """
    with RunStore.open(_existing_run_dir(run_dir)) as store:
        cfg, problem = _stored_run(store, overrides)
        return await _run(cfg, problem, store, view)


def _stored_run(store: RunStore, overrides: dict[str, Any] | None) -> tuple[StratagemConfig, Problem]:
    """A stored run's configuration (with `overrides`) and problem.

    Raises:
        StoreError: the store holds no run.
        ConfigError: its configuration is not valid in this version.
    """
    run = store.run()
    if run is None:
        raise StoreError(f"{store.run_dir} holds evaluations but no search run")
    try:
        cfg = StratagemConfig.model_validate(apply_overrides(run.config, overrides))
    except Exception as e:  # noqa: BLE001 - a config written by another version
        raise ConfigError(f"the run's stored configuration is not valid here: {e}") from e
    return cfg, stored_problem(store, run)


def stored_problem(store: RunStore, run: RunRecord) -> Problem:
    rec = next((p for p in store.problems() if p.id == run.problem_id), None)
    if rec is None:
        raise StoreError(f"the run's problem {run.problem_id[:12]} is missing from {store.run_dir}")
    return _parsed(store, rec)


def _parsed(store: RunStore, rec: ProblemRecord) -> Problem:
    return parse_problem(store.get_artifact(rec.source_hash), name=rec.name, path=rec.path, domain=rec.domain)


def _main_file(store: RunStore, rec: ProblemRecord) -> str:
    """The stored problem's main file (`Domain.main_file`); for a problem this version cannot
    read, the first file of the run's first design (a design keeps its own names)."""
    with contextlib.suppress(StratagemError):
        return get_domain(rec.domain).main_file(_parsed(store, rec))
    first = store.designs()[:1]
    return min(first[0].files) if first and first[0].files else ""


async def _run(cfg: StratagemConfig, problem: Problem, store: RunStore, view: RunView | None) -> RunOutcome:
    evaluator = make_evaluator(cfg.evaluation)
    claim_queue(evaluator, store.run_dir)
    policy = make_policy(cfg, problem, evaluator, store.run_dir)
    await preflight(policy)
    loop = SearchLoop(RunSession(cfg, problem, store, evaluator, policy, view))
    try:
        return await loop.run()
    finally:
        await evaluator.executor.aclose()


async def confirm_stored_run(run_dir: str | Path, top: int | None = None, blocks: int | None = None,
                             on_progress: Any = None, device: str | None = None) -> dict[str, Any] | None:
    """Run a confirmation round on a finished (or stopped) run, with the evaluation settings it
    ran with (`device` overrides its device); the round's body, or None when it has no ranked
    design. `top` defaults to the run's `confirm_top`, or the setting's default where the run
    skipped its round (`confirm_top = 0`): asking for a round is asking for one.

    Raises:
        StoreError: `run_dir` holds no run.
        HarnessError: a block of the round did not finish.
    """
    from stratagem.search.confirm import confirm_run

    with RunStore.open(_existing_run_dir(run_dir)) as store:
        cfg, problem = _stored_run(store, {"evaluation": {"device": device}})
        evaluator = make_evaluator(cfg.evaluation)
        try:
            default = cfg.search.confirm_top or type(cfg.search).model_fields["confirm_top"].default
            return await confirm_run(store, problem, evaluator, top=default if top is None else top,
                                     blocks=cfg.search.confirm_blocks if blocks is None else blocks,
                                     on_progress=on_progress)
        finally:
            await evaluator.executor.aclose()


def claim_queue(evaluator: Evaluator, run_dir: Path) -> None:
    """A queue executor's requests belong to this run directory (a resumed run finds its own)."""
    own = getattr(evaluator.executor, "own", None)
    if callable(own):
        own(str(Path(run_dir).resolve()))


async def preflight(policy: Policy) -> None:
    """The policy's models answer (policies without an LLM have nothing to check).

    Raises:
        ModelUnreachable: one does not.
    """
    check = getattr(policy, "preflight", None)
    if check is not None:
        await check()


@dataclass(frozen=True)
class RunSummary(st.RunViews):
    """What `stratagem show` prints: the run, its designs, iterations and spend."""

    run_dir: Path
    run: RunRecord | None
    problem: str
    views: list[DesignView]
    iterations: list[IterationRecord]
    spend: Spend
    reference_ms: dict[str, float | None]
    device: str | None = None
    """The device of the latest evaluation (its name, e.g. `NVIDIA H200`, when known)."""
    domain: str = field(kw_only=True)
    """The problem's domain."""
    confirmation: dict[str, Any] | None = None
    """The run's latest confirmation round (`search/confirm.py`), when it had one."""
    main_file: str = field(kw_only=True)
    """The problem's main file (`Domain.main_file`): an exported design's header goes there."""
    redteam: list[dict[str, Any]] = field(default_factory=list)
    """A red-team run's attempts and their outcomes (`search/policies/redteam/policy.py`), oldest first."""

    @property
    def strategy_counts(self) -> dict[str, dict[str, int]]:
        return st.strategy_counts(self.views)

    @property
    def objective(self) -> Objective:
        """The objective of the run's domain (the leaderboard's value column)."""
        return get_domain(self.domain).objective

    @property
    def tuning(self) -> Tuning | None:
        """The run's tune study (`--policy tune`), or None when no design carries parameters."""
        from stratagem.search.policies.tune import tuning

        return tuning(self.views)


def show_run(run_dir: str | Path) -> RunSummary:
    """Read a run directory, writing nothing into it (`RunStore.read`; works while the run is
    going on)."""
    run_dir = _existing_run_dir(run_dir)
    with RunStore.read(run_dir) as store:
        return read_run(store, run_dir)


def read_run(store: RunStore, run_dir: Path, designs: list[DesignRecord] | None = None,
             evaluations: list[EvaluationRecord] | None = None) -> RunSummary:
    """A stored run's record, as every view builds on it (`show`, the MCP server, the HTML
    report's `RunData`); `designs` and `evaluations` when the caller has read them already.

    Raises:
        StoreError: the run holds no problem (it never started), so no domain to read it by.
    """
    problems = store.problems()
    if not problems:
        raise StoreError(f"{run_dir}: the run holds no problem (it never started): nothing to show")
    domain = problems[0].domain
    run = store.run()
    evaluations = store.evaluations() if evaluations is None else evaluations
    views = st.stored_views(store, designs, evaluations)
    ref = st.reference_from(evaluations, get_domain(domain).names.key)
    env = evaluations[-1].environment if evaluations else {}
    device = str(env.get("device_name") or env.get("device") or "") or None
    main = _main_file(store, problems[0])
    return RunSummary(run_dir=run_dir, run=run, problem=problems[0].name,
                      views=views, iterations=store.iterations(),
                      spend=Spend.from_store(store, evaluations), reference_ms=ref,
                      device=device, domain=domain,
                      confirmation=(store.confirmations() or [None])[-1], main_file=main,
                      redteam=attempts_in(store))


def attempts_in(store: RunStore) -> list[dict[str, Any]]:
    """The red-team attempts a run's database holds (none: not a red-team run)."""
    saved = store.policy_state(ATTEMPTS_KEY)
    return [dict(a) for a in saved if isinstance(a, Mapping)] if isinstance(saved, list) else []


def stored_domain(run_dir: str | Path) -> str | None:
    """The domain of the problem a run directory holds (None: none readable yet; the run's
    own error says why)."""
    try:
        with RunStore.read(Path(run_dir)) as store:
            problems = store.problems()
    except (StratagemError, OSError):
        return None
    return problems[0].domain if problems else None


def _existing_run_dir(run_dir: str | Path) -> Path:
    """`run_dir` as a Path, when it holds a run database.

    Raises:
        ConfigError: it does not exist (a mistyped argument).
        StoreError: it exists but holds no run database.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such directory (RUN_DIR is a directory made by `stratagem run`)")
    if not (run_dir / RunStore.DB_NAME).exists():
        raise StoreError(f"{run_dir} holds no run database ({RunStore.DB_NAME})")
    return run_dir
