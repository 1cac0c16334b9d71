"""The project's own breach corpus (`breaches/`): every design a red-team run found fooling the
harness on one of the project's problems (`stratagem redteam`, docs/integrity.md), written
there as a fixture. Each is replayed through the harness as it is now and must be rejected:
a fixture accepted again is a harness that regressed."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.search.policies.redteam.corpus import RECORD, read, replay

CORPUS = Path(__file__).parent / "breaches"
FIXTURES = sorted(p.parent.name for p in CORPUS.rglob(RECORD))


def test_the_corpus_holds_fixtures() -> None:
    assert FIXTURES, f"{CORPUS} holds no breach fixture"
    assert len(read(CORPUS)) == len(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_a_recorded_breach_is_rejected_now(name: str) -> None:
    cfg = load_config(None, {"evaluation": {"device": "cpu"}}).evaluation
    [row] = replay(CORPUS / name, cfg)
    assert row.held, f"{name} ({row.exploit}) is {row.status} again: {row.caught_by or 'accepted'}"
