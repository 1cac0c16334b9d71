"""Owns running a suite (`stratagem bench`): one run per problem under one suite directory,
at most `jobs` problems at once (default `default_jobs`: as many as the executor has GPU
slots), every run in this process sharing one executor and its caches (baselines, the
device's peaks, reference facts and build caches are measured once and reused).
`resume_suite` goes on problem by problem: a `done` (or `skipped`) problem is never run again;
an interrupted, failed or killed one continues from its run database, as `stratagem resume`
does.

Spreading (issue 29): on a local executor with several devices, each problem's run is given
the device with the fewest runs on it (the first on ties) when it starts, and every request
of that run (its designs, its baseline, the peaks) goes to that device (`PinnedExecutor`),
through one evaluator per device. k problems on k GPUs thus run on all k at once, each design
compared with a reference timed on its own GPU (never measured again on every GPU a design
might land on); the device lock keeps timings on one GPU apart, and with `workers_per_gpu`
2 a GPU's second worker builds and checks while the first times. Executors whose workers are
elsewhere (queue, Ray) place requests themselves: their runs are not pinned.

Layout: SUITE_DIR/suite.json (`suite_manifest.py`) and SUITE_DIR/runs/KEY/ (a run directory
like any other: `stratagem show`, `export`, `report` read it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from stratagem.config import StratagemConfig, apply_overrides
from stratagem.domains import load_problem
from stratagem.errors import ConfigError, QueueStalled, StratagemError
from stratagem.evaluation.api import make_evaluator
from stratagem.evaluation.executors import Executor, PinnedExecutor, gpu_slots
from stratagem.evaluation.service import Evaluator
from stratagem.search.api import check_policy, claim_queue, make_policy, preflight, stored_problem
from stratagem.search.loop import RunOutcome, SearchLoop
from stratagem.search.policies.registry import policy_name, resolved_config
from stratagem.search.session import RunSession
from stratagem.search.suite_manifest import (
    FINAL_STATES,
    ProblemEntry,
    SuiteManifest,
    is_suite_dir,
    read_manifest,
    write_manifest,
)
from stratagem.store.sqlite import RunStore

OnChange = Callable[[ProblemEntry, SuiteManifest], None]
"""Hears each problem's change of state, with the manifest as it now stands (the live view)."""


class _Skip(Exception):
    """The problem cannot be searched with this configuration (its reason is the message)."""


def default_suite_dir(source: Path, root: Path = Path("runs")) -> Path:
    return root / f"suite-{source.resolve().name or 'problems'}-{time.strftime('%Y%m%d-%H%M%S')}"


def default_jobs(executor: Executor) -> int:
    """Problems at once when the user does not say (`--jobs`): one per GPU slot of the
    executor (`workers_per_gpu` per GPU: every GPU busy, one design timing while another
    builds), so that no GPU idles while problems wait; 1 on the CPU, where problems at once
    would build and time on the same cores."""
    return max(1, gpu_slots(executor))


def new_suite(suite_dir: Path, source: Path, problems: Sequence[ProblemEntry], cfg: StratagemConfig, *,
              jobs: int | None = None, levels: Sequence[str] | None = None,
              ids: Sequence[int] | None = None) -> SuiteManifest:
    """Write a new suite directory's manifest (every problem pending); nothing runs yet.
    `jobs` None: decided when the suite runs (`default_jobs`).

    Raises:
        ConfigError: the policy cannot run with `cfg`, `jobs` < 1, or `suite_dir` already holds
            a suite (continue it with `stratagem bench --resume`).
    """
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give 1 or more problems at once")
    check_policy(cfg)
    if is_suite_dir(suite_dir):
        raise ConfigError(f"{suite_dir} already holds a suite; continue it with `stratagem bench --resume {suite_dir}`")
    manifest = SuiteManifest(source=str(source), problems=tuple(problems), config=cfg.model_dump(mode="json"), jobs=jobs,
                             levels=tuple(levels) if levels else None,
                             ids=tuple(sorted(ids)) if ids is not None else None)
    write_manifest(suite_dir, manifest)
    return manifest


def suite_config(manifest: SuiteManifest) -> StratagemConfig:
    """The configuration the suite's runs start with.

    Raises:
        ConfigError: the stored configuration is not valid here (another version wrote it).
    """
    try:
        return StratagemConfig.model_validate(manifest.config)
    except Exception as e:  # noqa: BLE001 - a config written by another version
        raise ConfigError(f"the suite's stored configuration is not valid here: {e}") from e


QUEUE_STALLED = "waiting for a queue worker"
"""How a problem's stop reason begins when no worker served the queue within
`evaluation.queue_wait_s` (its state `interrupted`: `bench --resume` continues it)."""

async def run_suite(suite_dir: Path, *, jobs: int | None = None, on_change: OnChange | None = None,
                    evaluator: Evaluator | None = None) -> SuiteManifest:
    """Run (or continue) every problem of the suite not yet done, `jobs` at once (default the
    manifest's, else `default_jobs`), all through one executor (`evaluator`'s, else one built
    from the suite's configuration and closed at the end), spread over its devices (the
    module's docstring). Returns the manifest at the end.

    A problem's error is recorded in its entry (`failed`, with the reason) and the suite goes
    on; cancellation (Ctrl-C) marks the running problems `interrupted` and propagates.

    Raises:
        ConfigError: not a suite directory, or its configuration cannot run here.
    """
    suite_dir = Path(suite_dir)
    manifest = read_manifest(suite_dir)
    if jobs is not None:
        if jobs < 1:
            raise ConfigError(f"--jobs {jobs}: give 1 or more problems at once")
        manifest = replace(manifest, jobs=jobs)
        write_manifest(suite_dir, manifest)
    cfg = suite_config(manifest)
    check_policy(cfg)
    cfg = resolved_config(cfg)
    own = evaluator is None
    ev = evaluator if evaluator is not None else make_evaluator(cfg.evaluation)
    claim_queue(ev, suite_dir)
    state = _State(suite_dir, manifest, on_change)
    gate = asyncio.Semaphore(manifest.jobs or default_jobs(ev.executor))
    devices = _Devices(ev)
    todo = [p.key for p in manifest.problems if p.state not in FINAL_STATES]
    try:
        await asyncio.gather(*(_one(state, key, cfg, devices, gate) for key in todo))
    finally:
        if own:
            await ev.executor.aclose()
    return state.manifest


class _State:
    """The manifest as the suite's tasks change it (one event loop: no locking needed)."""

    def __init__(self, suite_dir: Path, manifest: SuiteManifest, on_change: OnChange | None) -> None:
        self.suite_dir = suite_dir
        self.manifest = manifest
        self.on_change = on_change
        self._session_open = False

    def set(self, key: str, **changes: object) -> None:
        old = self.manifest.entry(key)
        entry = replace(old, **changes)  # type: ignore[arg-type]
        now = time.time()
        if old.state == "running" and entry.state != "running" and old.started_at is not None:
            entry = replace(entry, active_s=old.active_s + max(0.0, (entry.finished_at or now) - old.started_at))
        sessions = self.manifest.sessions
        if not self._session_open:  # this invocation's first change opens its session
            sessions, self._session_open = (*sessions, (now, now)), True
        self.manifest = replace(self.manifest.with_entry(entry), sessions=(*sessions[:-1], (sessions[-1][0], now)))
        write_manifest(self.suite_dir, self.manifest)
        if self.on_change is not None:
            self.on_change(entry, self.manifest)


class _Devices:
    """Which device each running problem has (the module's docstring): the one with the fewest
    runs on it, with one evaluator per device shared by the runs on it. Without several
    devices of a known machine, every run shares the suite's evaluator as it is."""

    def __init__(self, evaluator: Evaluator) -> None:
        ex = evaluator.executor
        self.shared = evaluator
        self.spread = ex.host() is not None and len(ex.devices()) > 1
        self.running = dict.fromkeys(ex.devices(), 0)
        self.evaluators: dict[str, Evaluator] = {}

    @contextmanager
    def take(self) -> Iterator[tuple[Evaluator, str | None]]:
        """(the evaluator of the run, its device: None when runs are not pinned)."""
        if not self.spread:
            yield self.shared, None
            return
        dev = min(self.running, key=lambda d: self.running[d])
        self.running[dev] += 1
        try:
            if dev not in self.evaluators:
                self.evaluators[dev] = Evaluator(self.shared.cfg, PinnedExecutor(self.shared.executor, dev), dev)
            yield self.evaluators[dev], dev
        finally:
            self.running[dev] -= 1


async def _one(state: _State, key: str, cfg: StratagemConfig, devices: _Devices,
               gate: asyncio.Semaphore) -> None:
    async with gate:
        with devices.take() as (evaluator, device):
            await _one_on(state, key, cfg, evaluator, device)


async def _one_on(state: _State, key: str, cfg: StratagemConfig, evaluator: Evaluator, device: str | None) -> None:
    """Run one problem through `evaluator` (on `device`, when runs are pinned), recording its state."""
    entry = state.manifest.entry(key)
    state.set(key, state="running", started_at=time.time(), finished_at=None, stop_reason=None, device=device)
    try:
        outcome = await _run_problem(entry, state.suite_dir / entry.run_dir, cfg, evaluator)
    except asyncio.CancelledError:
        state.set(key, state="interrupted", stop_reason="interrupted by the user", finished_at=time.time())
        raise
    except _Skip as e:
        state.set(key, state="skipped", stop_reason=str(e), finished_at=time.time())
        return
    except QueueStalled as e:  # stopped cleanly: `bench --resume` continues it
        state.set(key, state="interrupted", stop_reason=f"{QUEUE_STALLED}: {e}", finished_at=time.time())
        return
    except StratagemError as e:
        state.set(key, state="failed", stop_reason=f"{type(e).__name__}: {e}", finished_at=time.time())
        return
    except Exception as e:  # noqa: BLE001 - one problem's crash must not stop the other problems
        state.set(key, state="failed", stop_reason=f"{type(e).__name__}: {e}", finished_at=time.time())
        return
    state.set(key, state="done", stop_reason=outcome.stop_reason if outcome else "finished before",
              finished_at=time.time())


async def _run_problem(entry: ProblemEntry, run_dir: Path, cfg: StratagemConfig,
                       evaluator: Evaluator) -> RunOutcome | None:
    """Start the problem's run in `run_dir`, or continue the run already there with the
    settings it started with (None: that run had already finished)."""
    if (run_dir / RunStore.DB_NAME).exists():
        with RunStore.open(run_dir) as store:
            run = store.run()
            if run is not None:
                if run.status == "finished":
                    return None  # killed after its run finished, before the manifest said so
                try:
                    run_cfg = StratagemConfig.model_validate(apply_overrides(run.config, None))
                except Exception as e:  # noqa: BLE001 - a config written by another version
                    raise ConfigError(f"the run's stored configuration is not valid here: {e}") from e
                problem = stored_problem(store, run)
                policy = make_policy(run_cfg, problem, evaluator, run_dir)
                await preflight(policy)
                return await SearchLoop(RunSession(run_cfg, problem, store, evaluator, policy)).run()
    problem = load_problem(entry.path)
    try:  # the policy named for this problem (its domain's default when none is) or why there is none
        cfg = resolved_config(cfg, problem)
    except ConfigError as e:
        raise _Skip(str(e)) from e
    policy = make_policy(cfg, problem, evaluator, run_dir)
    await preflight(policy)
    with RunStore.open(run_dir) as store:
        store.add_problem(problem)
        store.start_run(problem.id, policy_name(cfg, problem), cfg.model_dump(mode="json"))
        return await SearchLoop(RunSession(cfg, problem, store, evaluator, policy)).run()
