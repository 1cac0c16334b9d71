"""Owns the reference-baseline cache: a domain's baseline timings per problem, hardware and
what else its `BaselineRules` (`domains/base.py`) say they hold for.

Key: the rules' version, the problem's content hash, where it was measured (the worker's host
and physical device, never the parent's), the worker environment's part the rules name, the
modes and the rules' settings: two machines, or two GPUs of one, never share a baseline. One JSON file per key under `<cache_dir>/baselines/`
(`BaselineCache` also keeps the reference facts, under `<cache_dir>/reference_facts/`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stratagem.domains.base import BaselineRules


def baseline_key(rules: BaselineRules, problem_id: str, environment: Mapping[str, Any], modes: Sequence[str]) -> str:
    """The key of a baseline measured in `environment` (a worker's, with the `host` and
    `physical_device` of the slot it ran in)."""
    parts = {
        "protocol": rules.version,
        "problem": problem_id,
        "host": environment.get("host"),
        "physical_device": environment.get("physical_device"),
        **rules.identity(environment),
        "modes": sorted(modes),
        "timing": dict(sorted(rules.settings.items())),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def slot_key(rules: BaselineRules, problem_id: str, host: str, device: str, modes: Sequence[str]) -> str:
    """What the parent knows before any worker ran (not the worker's environment): the key
    of the pointer to the latest baseline measured for this problem on machine `host` and
    physical `device` (`host` `*`: on any machine, for executors whose workers are elsewhere)."""
    parts = {"protocol": rules.version, "problem": problem_id, "host": host, "device": device,
             "modes": sorted(modes), "timing": dict(sorted(rules.settings.items()))}
    return "latest-" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


class BaselineCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def latest(self, slot: str) -> dict[str, Any] | None:
        """The entry the pointer `slot` names (the last one measured there), or None."""
        ptr = self.get(slot)
        key = (ptr or {}).get("points_to")
        return self.get(str(key)) if isinstance(key, str) else None

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) and data.get("key") == key else None

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self._path(key).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, **record}, indent=1), encoding="utf-8")
        os.replace(tmp, self._path(key))
