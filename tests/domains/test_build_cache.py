"""The shared build cache of `load_inline` extensions and builds outside the device lock
(issue 28): a hit on an unchanged source, a miss on a changed source or flag, a tampered entry
refused and rebuilt, and no device lock held while a build runs."""

from __future__ import annotations

import fcntl
import inspect
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from stratagem.domains.pytorch.build import build_cache, inline_builds
from stratagem.domains.pytorch.build.build_cache import (
    BuildCache,
    build_slot,
    concurrent_builds,
    key_of,
)
from stratagem.domains.pytorch.worker.device_use import DeviceUse

ROOT = Path(__file__).resolve().parents[2]
CALL = {"name": "relu_ext", "cpp_sources": "torch::Tensor f(torch::Tensor x);", "cuda_sources": None,
        "functions": ["f"], "extra_cflags": ["-O3"], "extra_cuda_cflags": None, "extra_ldflags": None,
        "extra_include_paths": None, "with_cuda": None, "with_pytorch_error_handling": True,
        "no_implicit_headers": False}


def _key(**change) -> str:
    return key_of(inline_builds.build_inputs({**CALL, **change}))


def _library(tmp_path: Path, body: bytes = b"\x7fELF not really") -> Path:
    lib = tmp_path / "built" / "relu_ext.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(body)
    return lib


def test_the_key_follows_sources_flags_and_toolchain() -> None:
    base = _key()
    assert _key() == base  # unchanged: the same entry
    assert _key(cpp_sources="torch::Tensor f(torch::Tensor y);") != base
    assert _key(extra_cflags=["-O2"]) != base
    assert _key(functions=["f", "g"]) != base
    assert _key(name="relu_ext2") != base
    tc = inline_builds.build_inputs(CALL)["toolchain"]
    assert tc["torch"] and tc["python"]


def test_an_unchanged_source_hits_and_the_copy_is_verified(tmp_path) -> None:
    cache = BuildCache(tmp_path / "cache")
    key = _key()
    assert cache.fetch(key, tmp_path / "w1").library is None  # a plain miss
    entry = cache.publish(key, _library(tmp_path), "relu_ext", inline_builds.build_inputs(CALL))
    assert entry is not None and (entry / "relu_ext.so").stat().st_mode & 0o777 == 0o444  # read-only
    got = cache.fetch(key, tmp_path / "w2")
    assert got.library == tmp_path / "w2" / "relu_ext.so" and got.module == "relu_ext" and got.rejected is None
    assert got.library is not None and got.library.read_bytes() == b"\x7fELF not really"
    assert cache.publish(key, _library(tmp_path, b"other"), "relu_ext", {}) is None  # the first entry stays
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["inputs"]["cpp_sources"][0] != CALL["cpp_sources"]  # sources recorded as hashes


def test_a_tampered_library_is_refused_and_moved_aside(tmp_path) -> None:
    cache = BuildCache(tmp_path / "cache")
    key = _key()
    entry = cache.publish(key, _library(tmp_path), "relu_ext", {})
    assert entry is not None
    lib = entry / "relu_ext.so"
    entry.chmod(0o755)
    lib.chmod(0o644)
    lib.write_bytes(b"\x7fELF poisoned")  # same user, after publishing
    got = cache.fetch(key, tmp_path / "w")
    assert got.library is None and got.rejected is not None and "hash" in got.rejected
    assert not entry.exists() and any((tmp_path / "cache" / "rejected").iterdir())
    assert not (tmp_path / "w" / "relu_ext.so").exists()  # nothing of it is left to load
    assert cache.fetch(key, tmp_path / "w").library is None  # next time: a plain miss, rebuilt


def test_an_entry_copied_under_another_key_is_refused(tmp_path) -> None:
    cache = BuildCache(tmp_path / "cache")
    mine, theirs = _key(), _key(extra_cflags=["-O2"])
    entry = cache.publish(mine, _library(tmp_path), "relu_ext", {})
    assert entry is not None
    target = cache.entry(theirs)
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-r", str(entry), str(target)], check=True)
    got = cache.fetch(theirs, tmp_path / "w")
    assert got.library is None and got.rejected == "its manifest names another key"


def test_concurrent_builds_follow_the_cores_and_a_slot_is_waited_for(tmp_path) -> None:
    assert [concurrent_builds(n) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]
    waits: list[str] = []

    class Waiting:
        def __enter__(self):
            waits.append("wait")

        def __exit__(self, *a):
            return None

    with build_slot(tmp_path, 1) as first:
        assert first < 1.0
        fd = os.open(tmp_path / "slot-0.lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the one slot is taken
        os.close(fd)
    with build_slot(tmp_path, 2, Waiting), build_slot(tmp_path, 2, Waiting):
        assert waits == []  # two slots: neither waits


def _exclusive_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_build_lets_the_shared_lock_go_and_takes_it_again(tmp_path, monkeypatch) -> None:
    """On a GPU a build holds no device lock: another design may take it exclusively to time."""
    lock = tmp_path / "dev.lock"
    use = DeviceUse({"device": "cuda:0", "timing_lock": str(lock)})
    seen: dict[str, bool] = {}

    def fake_build(name, cpp_sources, **_kw):
        seen["free_during_build"] = _exclusive_free(lock)
        return types.SimpleNamespace(__file__="")

    monkeypatch.delenv(build_cache.ENV_VAR, raising=False)
    monkeypatch.setenv(inline_builds.PCH_VAR, "0")
    import torch.utils.cpp_extension as ext

    monkeypatch.setitem(inline_builds._state, "signature", inspect.signature(ext.load_inline))
    monkeypatch.setitem(inline_builds._state, "original", fake_build)
    monkeypatch.setitem(inline_builds._state, "original_load", fake_build)
    monkeypatch.setitem(inline_builds._state, "pch", None)
    monkeypatch.setattr(ext, "load_inline", ext.load_inline)  # restored after the test
    monkeypatch.setattr(ext, "load", ext.load)
    inline_builds.install("cpu", inline_builds.Hooks(use.released, lambda: use.phase("wait")))
    with use.hold("shared"):
        assert not _exclusive_free(lock)
        ext.load_inline(name="x", cpp_sources="")
        assert not _exclusive_free(lock)  # held again after the build
    assert seen == {"free_during_build": True}
    assert [w.mode for w in use.windows] == ["shared", "shared"]  # the hold, split around the build
    assert inline_builds.EVENTS[-1].outcome == "uncached"

    cpu = DeviceUse({"device": "cpu", "timing_lock": str(lock)})  # on the CPU a build competes with timing
    inline_builds.install("cpu", inline_builds.Hooks(cpu.released, lambda: cpu.phase("wait")))
    with cpu.hold("shared"):
        ext.load_inline(name="x", cpp_sources="")
    assert seen == {"free_during_build": False}


def _probe(tmp_path: Path, flag: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), build_cache.ENV_VAR: str(tmp_path / "cache"),
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), inline_builds.PCH_VAR: "0"}
    out = subprocess.run([sys.executable, str(ROOT / "tests/fixtures/builds/cache_probe.py"), str(tmp_path / "dev.lock"),
                          flag], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_real_builds_hit_miss_and_rebuild_a_tampered_entry(tmp_path) -> None:
    """A C++-only extension (nvcc is not needed): built once, loaded from the cache by a fresh
    process without building, and rebuilt over a tampered entry (a changed flag or source is a
    new key: test_the_key_follows_sources_flags_and_toolchain);
    while it builds, another process's exclusive hold of the device lock goes through."""
    first = _probe(tmp_path, "-O2")
    assert first["ok"] and [e["outcome"] for e in first["events"]] == ["built"]
    assert first["exclusive_taken_at"] is not None and first["start"] < first["exclusive_taken_at"] < first["end"]
    assert first["held_after"]
    again = _probe(tmp_path, "-O2")
    assert again["ok"] and [e["outcome"] for e in again["events"]] == ["hit"]
    assert again["events"][0]["build_s"] < 5.0 and again["events"][0]["key"] == first["events"][0]["key"]
    entry = BuildCache(tmp_path / "cache").entry(first["events"][0]["key"])
    entry.chmod(0o755)
    (entry / "stratagem_cache_probe.so").chmod(0o644)
    with open(entry / "stratagem_cache_probe.so", "ab") as fh:
        fh.write(b"\0poison")
    rebuilt = _probe(tmp_path, "-O2")
    assert rebuilt["ok"] and [e["outcome"] for e in rebuilt["events"]] == ["rejected"]
    assert "hash" in rebuilt["events"][0]["note"]
    assert [e["outcome"] for e in _probe(tmp_path, "-O2")["events"]] == ["hit"]  # the rebuilt entry


def test_the_precompiled_header_is_read_under_a_shared_lock_and_never_deleted(tmp_path, monkeypatch) -> None:
    """torch rebuilds its one precompiled header in place and deletes it on calls without
    use_pch: a worker rebuilds it only exclusively, reads it shared, and never deletes it."""
    import torch.utils.cpp_extension as ext

    torch_dir = tmp_path / "torch"
    (torch_dir / "include" / "torch").mkdir(parents=True)
    sign = torch_dir / "include" / "torch" / "extension.h.sign"
    monkeypatch.setattr(ext, "_TORCH_PATH", str(torch_dir))
    monkeypatch.setattr(ext, "_check_and_build_extension_h_precompiler_headers",
                        lambda cflags, paths: sign.write_text(" ".join(cflags or [])))
    monkeypatch.setattr(ext, "load_inline", ext.load_inline)
    monkeypatch.setattr(ext, "load", ext.load)
    monkeypatch.setattr(ext, "remove_extension_h_precompiler_headers", ext.remove_extension_h_precompiler_headers)
    monkeypatch.setenv(build_cache.ENV_VAR, str(tmp_path / "cache"))
    inline_builds.install("cpu")
    ext.remove_extension_h_precompiler_headers()  # the worker's: a no-op
    (torch_dir / "include" / "torch" / "extension.h.gch").write_bytes(b"gch")
    ext.remove_extension_h_precompiler_headers()
    assert (torch_dir / "include" / "torch" / "extension.h.gch").exists()
    lock = tmp_path / "cache" / "locks" / "pch.lock"

    def try_lock(flag: int) -> bool:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, flag | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    call = {"use_pch": True, "extra_cflags": ["-O3"], "extra_include_paths": None}
    with inline_builds._header(call):
        assert call["use_pch"] is True and sign.read_text() == "-O3"
        assert not try_lock(fcntl.LOCK_EX) and try_lock(fcntl.LOCK_SH)  # others read; none rebuilds
    assert try_lock(fcntl.LOCK_EX)

    reads = iter(["-O3", "-O1"])  # another flag set rebuilt it between this one's two holds
    monkeypatch.setattr(inline_builds, "_read", lambda _p: next(reads))
    call = {"use_pch": True, "extra_cflags": ["-O3"], "extra_include_paths": None}
    with inline_builds._header(call):
        assert call["use_pch"] is False  # built without the header (gcc ignores one that does not fit)
