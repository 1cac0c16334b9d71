"""Tampering the worker sees at run time (`guard.Snapshot.hook_changes`, `guard.Inputs`): a
process-wide hook however it is written (the registration function, the registry reached
through a method's `__globals__`, C code), what a call stores on the harness's input tensors
or swaps under them; and what it does not count (hooks that were there before the snapshot,
a hook on a module of the design's own, torch's own hooks). Each case runs in a fresh
interpreter so no hook outlives it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CASES = {
    "api": "h = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)",
    "globals": "torch.nn.Linear.register_forward_hook.__globals__['_global_forward_pre_hooks'][7] = print",
    "c_api": ("import ctypes\nf = ctypes.pythonapi.PyDict_SetItem\n"
              "f.argtypes = (ctypes.py_object,) * 3\n"
              "f(vars(torch.nn.modules.module)['_global_backward_hooks'], 7, len)"),
    "replaced": "torch.nn.modules.module._global_forward_hooks = {7: print}",
    "mode": "torch.overrides.TorchFunctionMode().__enter__()",
    "trace": "sys.setprofile(lambda *a: None)",  # read by `changes`, not after each call
}


def _run(body: str) -> list[str]:
    code = textwrap.dedent("""
        import sys, torch
        from stratagem.domains.pytorch.worker import guard
        before = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)  # before: not counted
        s = guard.Snapshot()
        torch.nn.Linear(2, 2).register_forward_hook(lambda m, i, o: o)  # a module's own hook
    """) + body + "\nprint('\\n'.join(s.hook_changes(trace=True)))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [line for line in r.stdout.splitlines() if line]


@pytest.mark.parametrize("how", sorted(CASES))
def test_a_process_wide_hook_is_seen_however_it_is_written(how: str) -> None:
    found = _run(CASES[how])
    assert len(found) == 1, found


def test_hooks_there_before_and_a_modules_own_are_not_counted() -> None:
    assert _run("") == []


def test_a_profile_function_is_read_only_where_the_harness_holds_none() -> None:
    """The harness's own profile hook is on during the provenance stage's measured calls: the
    check after each call leaves trace and profile functions to the stage-end snapshot."""
    code = ("import sys, torch\nfrom stratagem.domains.pytorch.worker import guard\ns = guard.Snapshot()\n"
            "sys.setprofile(lambda *a: None)\nprint(s.hook_changes(), len(s.changes()))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split() == ["[]", "1"], r.stdout + r.stderr[-2000:]


def test_removing_a_hook_that_was_there_before_is_seen() -> None:
    assert _run("before.remove()") == [
        "1 hook(s) present before the candidate loaded were removed from "
        "torch.nn.modules.module._global_forward_pre_hooks"]


def test_state_on_the_inputs_is_seen() -> None:
    import torch

    from stratagem.domains.pytorch.worker import guard

    x, y = torch.randn(4, 4), torch.randn(4)
    vars(x)["mine"] = 1  # there before the call: not the call's
    sealed = guard.Inputs.of([x, y, 3])
    assert sealed.tampered() is None
    vars(y)["stash"] = torch.zeros(1)
    assert "attribute(s) stash" in (sealed.tampered() or "") and "tensor 1" in (sealed.tampered() or "")
    del vars(y)["stash"]
    x.untyped_storage().resize_(2 * x.untyped_storage().nbytes())
    assert "storage of the harness's input tensor 0" in (sealed.tampered() or "")


def test_torchs_own_marks_on_an_input_are_not_state() -> None:
    """An honest design may mark its inputs' dimensions dynamic (torch sets its own attributes);
    a tensor stored under one of those names is state all the same."""
    import torch

    from stratagem.domains.pytorch.worker import guard

    x = torch.randn(4, 4)
    sealed = guard.Inputs.of([x])
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.maybe_mark_dynamic(x, 1)
    assert sealed.tampered() is None
    vars(x)["_dynamo_hint_overrides"] = {0: torch.zeros(4)}
    assert "_dynamo_hint_overrides" in (sealed.tampered() or "")
