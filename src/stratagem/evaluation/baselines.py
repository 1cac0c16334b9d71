"""Owns the reference-baseline cache: eager/compile timings per problem, hardware and torch.

Key: problem content hash, device name, torch and CUDA versions, baseline modes and the
timing settings. One JSON file per key under `<cache_dir>/baselines/`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TIMING_PROTOCOL = 3
"""Bumped whenever the way the worker times changes, so older cached baselines are not reused
(2: fresh input values for every timed call; 3: compiled modes paired with eager)."""


def baseline_key(
    problem_id: str, environment: Mapping[str, Any], modes: Sequence[str], timing: Mapping[str, Any]
) -> str:
    parts = {
        "protocol": TIMING_PROTOCOL,
        "problem": problem_id,
        "device_name": environment.get("device_name"),
        "device": environment.get("device"),
        "torch": environment.get("torch"),
        "cuda": environment.get("cuda"),
        "threads": environment.get("threads"),
        "modes": sorted(modes),
        "timing": dict(sorted(timing.items())),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def slot_key(problem_id: str, host: str, device: str, modes: Sequence[str], timing: Mapping[str, Any]) -> str:
    """What the parent knows before any worker ran (no device name, no torch version): the key
    of the pointer to the latest baseline measured for this problem on this host and device."""
    parts = {"protocol": TIMING_PROTOCOL, "problem": problem_id, "host": host, "device": device,
             "modes": sorted(modes), "timing": dict(sorted(timing.items()))}
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
