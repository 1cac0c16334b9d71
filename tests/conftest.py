"""Shared fixtures. No test may reach a real LLM: model requests are disabled suite-wide."""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    from pydantic_ai import models
except ImportError:  # the GPU machine runs the `gpu` tests without pydantic-ai: no LLM there
    models = None
else:
    models.ALLOW_MODEL_REQUESTS = False

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Compile caches, baselines and locks go to a per-session temp dir, never ~/.cache."""
    d = tmp_path_factory.getbasetemp() / "stratagem-cache"
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(d))
    # The busy guard off by default (docs/timing.md, "A busy machine"): the suite runs beside
    # other work on purpose, and a functional test must not turn into "not measured" there.
    # Its own tests (test_busy, test_paired_timing, test_gpu_busy) turn it on.
    monkeypatch.setenv("STRATAGEM_BUSY_GUARD", "off")
    return d


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def cpu_config():
    """A fast CPU evaluation config: short timing budgets, eager baseline only."""
    from stratagem.config import load_config

    return load_config(
        None,
        {
            "evaluation": {
                "device": "cpu",
                "spare_workers": "never",  # a spare imports torch beside each test's evaluation (tests/evaluation/test_spares.py)
                "timeout_s": 60,
                "compile_timeout_s": 300,  # set too: 60 s then bounds the run, not the builds as well
                "baselines": ["eager"],
                "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 50},
            }
        },
    ).evaluation
