"""Architecture rules, checked on the source with `ast` (and one fresh-interpreter import check).

- torch/triton only in the worker-side PyTorch modules;
- pydantic_ai only under stratagem/agents;
- sqlite3 only in the store;
- the environment is read only in config.py (explicit, justified exceptions below);
- core/ depends only on the standard library, stratagem.core and stratagem.errors;
- importing every other module does not load torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stratagem

PKG = Path(stratagem.__file__).resolve().parent  # the package the other tests import
SRC = PKG.parent

WORKER_TORCH_MODULES = frozenset(
    f"stratagem.domains.pytorch.worker.{m}" for m in ("runtime", "compare", "timing", "stages", "guard", "integrity", "audit", "roofline", "provenance", "anchor", "params", "timed", "record", "judge", "ipc", "memory", "environment", "confirm", "device_use", "context", "prebuild", "precision", "profile", "correctness", "redteam.audit", "redteam.timing", "redteam.fired", "referee")
) | {"stratagem.domains.pytorch.build.builds", "stratagem.domains.pytorch.build.inline_builds"}
"""The only modules allowed to import torch (or triton): they run inside the sandboxed worker."""

ENV_READERS = frozenset({"stratagem.config", "stratagem.evaluation.queue_worker"})
"""The modules allowed to touch os.environ / os.getenv without restriction: the config, and
the queue worker, an entry point on a GPU host where stratagem.config cannot load (no
pydantic there): it reads its cache directory and hands its environment to the sandbox, which
filters it as it filters the parent's."""

ENV_EXCEPTIONS: dict[str, frozenset[str]] = {
    # The worker reports which GPUs it was given (its environment() snapshot for the
    # response); it runs in the sandbox, where stratagem.config is not the parent's config, and
    # only reads this one variable.
    "stratagem.domains.pytorch.worker.environment": frozenset({"CUDA_VISIBLE_DEVICES"}),
    # The command domain's worker names the GPU its slot pinned, the same way (nvidia-smi's index).
    "stratagem.domains.command.worker": frozenset({"CUDA_VISIBLE_DEVICES"}),
    # The build root torch itself uses for extensions: the slot's TORCH_EXTENSIONS_DIR, read
    # the way torch reads it, so the worker claims the directory its builds really use.
    "stratagem.domains.pytorch.build.builds": frozenset({"TORCH_EXTENSIONS_DIR"}),
    # The build cache the slot names, the header switch, the architecture a prebuild worker
    # builds for (no GPU to ask), and the toolchain a build's key records.
    "stratagem.domains.pytorch.build.inline_builds": frozenset({
        "STRATAGEM_BUILD_CACHE", "STRATAGEM_BUILD_PCH", "STRATAGEM_BUILD_HEADER_DIET", "STRATAGEM_BUILD_ARCH", "CXX",
        "CC", "CUDAHOSTCXX", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST"}),
}
"""module -> the variables it may read with `os.environ.get("NAME", ...)`, and nothing else."""


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> list[tuple[str, Path, ast.Module]]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        out.append((module_name(p), p, ast.parse(p.read_text(encoding="utf-8"), filename=str(p))))
    return out


MODULES = modules()


def imported(mod: str, path: Path, tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Every absolute module name imported anywhere in the file (any nesting), with its line."""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, node.lineno
            for a in node.names:  # `from stratagem import config` imports stratagem.config
                yield f"{target}.{a.name}", node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno  # importlib.import_module("torch")


def top(name: str) -> str:
    return name.split(".")[0]


def violations(pred, allowed) -> list[str]:
    return [
        f"{mod} ({path.relative_to(SRC)}:{line}) imports {name}"
        for mod, path, tree in MODULES
        for name, line in imported(mod, path, tree)
        if pred(mod, name) and not allowed(mod)
    ]


def test_scanner_sees_the_package():
    names = {m for m, _, _ in MODULES}
    assert {"stratagem.config", "stratagem.core.graph", "stratagem.store.sqlite"} <= names
    assert WORKER_TORCH_MODULES <= names, "an allowed torch module moved; update the allow-list"
    # self-check: the scanner does find the imports the rules are about
    found = {top(n) for m, p, t in MODULES if m in WORKER_TORCH_MODULES for n, _ in imported(m, p, t)}
    assert "torch" in found
    assert any(n == "sqlite3" for m, p, t in MODULES for n, _ in imported(m, p, t))


def test_only_worker_modules_import_torch_or_triton():
    bad = violations(lambda m, n: top(n) in ("torch", "triton"), lambda m: m in WORKER_TORCH_MODULES)
    assert not bad, "\n".join(bad)


def test_only_agents_import_pydantic_ai():
    bad = violations(
        lambda m, n: top(n) == "pydantic_ai",
        lambda m: m == "stratagem.agents" or m.startswith("stratagem.agents."),
    )
    assert not bad, "\n".join(bad)


def test_only_the_store_imports_sqlite3():
    bad = violations(lambda m, n: top(n) == "sqlite3", lambda m: m == "stratagem.store.sqlite")
    assert not bad, "\n".join(bad)


def _env_get_name(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    """For an `os.environ` node used as `os.environ.get("NAME", ...)`, return NAME."""
    attr = parents.get(node)
    call = parents.get(attr) if attr is not None else None
    if (
        isinstance(attr, ast.Attribute)
        and attr.attr == "get"
        and isinstance(call, ast.Call)
        and call.func is attr
        and call.args
        and isinstance(call.args[0], ast.Constant)
    ):
        return str(call.args[0].value)
    return None


def env_uses(tree: ast.Module) -> list[tuple[int, str, str | None]]:
    """(line, what, variable-if-a-plain-get) for every os.environ/os.getenv/putenv use."""
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv")
        ):
            var = _env_get_name(node, parents) if node.attr == "environ" else None
            out.append((node.lineno, f"os.{node.attr}", var))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for a in node.names:
                if a.name in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"):
                    out.append((node.lineno, f"from os import {a.name}", None))
    return out


def test_environment_is_read_only_in_config():
    bad = []
    for mod, path, tree in MODULES:
        if mod in ENV_READERS:
            continue
        allowed_vars = ENV_EXCEPTIONS.get(mod, frozenset())
        for line, what, var in env_uses(tree):
            if var is not None and var in allowed_vars:
                continue
            bad.append(f"{path.relative_to(SRC)}:{line} uses {what}" + (f" ({var})" if var else ""))
    assert not bad, "read the environment through stratagem.config:\n" + "\n".join(bad)


def test_env_scanner_finds_config_reads():
    [(_, path, tree)] = [m for m in MODULES if m[0] == "stratagem.config"]
    assert any(what == "os.environ" for _, what, _ in env_uses(tree))
    sample = ast.parse("import os\na = os.getenv('X')\nb = os.environ['Y']\nc = os.environ.get('Z')\n")
    assert [(w, v) for _, w, v in env_uses(sample)] == [
        ("os.getenv", None), ("os.environ", None), ("os.environ", "Z")
    ]


STDLIB = frozenset(sys.stdlib_module_names)


def test_core_imports_only_stdlib_and_core():
    bad = []
    for mod, path, tree in MODULES:
        if not (mod == "stratagem.core" or mod.startswith("stratagem.core.")):
            continue
        for name, line in imported(mod, path, tree):
            t = top(name)
            ok = (
                t in STDLIB
                or name == "stratagem.core"
                or name.startswith("stratagem.core.")
                or name == "stratagem.errors"
                or name.startswith("stratagem.errors.")  # `from stratagem.errors import X`
            )
            if not ok:
                bad.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def parent_side_modules() -> list[str]:
    return sorted(
        m
        for m, _, _ in MODULES
        if m not in WORKER_TORCH_MODULES and not m.endswith("__main__")
    )


def test_parent_side_imports_do_not_load_torch():
    mods = parent_side_modules()
    assert "stratagem.cli" in mods and "stratagem.evaluation.api" in mods
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "    heavy = sorted(k for k in ('torch', 'triton') if k in sys.modules)\n"
        "    assert not heavy, f'importing {m} loaded {heavy}'\n"
        "print('ok', len(sys.modules))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=SRC
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok")


@pytest.mark.parametrize("mod", sorted(WORKER_TORCH_MODULES))
def test_subprocess_check_would_catch_torch(mod):
    # Guard against a vacuous check: the worker modules do import torch at module level.
    tree = next(t for m, _, t in MODULES if m == mod)
    assert any(
        isinstance(n, ast.Import) and any(top(a.name) == "torch" for a in n.names) for n in tree.body
    )


def test_import_scanner_resolves_nested_relative_and_dynamic_imports():
    tree = ast.parse(
        "def f():\n"
        "    import torch.nn as nn\n"
        "from . import runtime\n"
        "from ..core import graph\n"
        "import importlib\n"
        "importlib.import_module('triton')\n"
    )
    names = [n for n, _ in imported("stratagem.domains.pytorch.x", Path("x.py"), tree)]
    assert "torch.nn" in names
    assert "stratagem.domains.pytorch.runtime" in names
    assert "stratagem.domains.core.graph" in names
    assert "triton" in names


# -- package directions ---------------------------------------------------------------------

LAYERS: tuple[tuple[str, ...], ...] = (
    ("stratagem", "stratagem.errors", "stratagem.core"),
    ("stratagem.worker_api",),  # what a domain and the evaluator share: the request protocol, the device lock
    ("stratagem.config",),
    ("stratagem.store",),
    ("stratagem.domains",),
    ("stratagem.evaluation",),  # the service and its adapters: sandbox, executors, worker, judge, outcome, ...
    ("stratagem.context",),
    ("stratagem.agents",),
    ("stratagem.search.policies",),
    ("stratagem.search",),
    ("stratagem.report",),
    ("stratagem.cli", "stratagem.mcp", "stratagem.__main__"),  # the entry points: the CLI, the MCP server
)
"""Lowest first: a module imports only modules of its own layer or a lower one."""

def layer_of(name: str) -> int | None:
    """The layer of a stratagem module: its longest matching prefix in LAYERS."""
    best: tuple[int, int] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (rank, len(p))
    return None if best is None else best[0]


def test_every_module_has_a_layer():
    missing = [m for m, _, _ in MODULES if layer_of(m) is None]
    assert not missing, missing
    assert layer_of("stratagem.worker_api.protocol") < layer_of("stratagem.domains.pytorch.domain")
    assert layer_of("stratagem.domains.pytorch.domain") < layer_of("stratagem.evaluation.sandbox")
    assert layer_of("stratagem.domains.pytorch.domain") < layer_of("stratagem.evaluation.service")


def upward(mod: str, path: Path, tree: ast.Module) -> list[str]:
    """The imports of one module that point to a higher layer."""
    mine, out = layer_of(mod), []
    for name, line in imported(mod, path, tree):
        theirs = layer_of(name) if name.startswith("stratagem.") else None
        if theirs is not None and mine is not None and theirs > mine:
            out.append(f"{path.name}:{line}: {mod} (layer {mine}) imports {name} (layer {theirs})")
    return out


def test_packages_import_downwards_only():
    bad = [v for mod, path, tree in MODULES for v in upward(mod, path, tree)]
    assert not bad, "layers import downwards only (docs/architecture.md):\n" + "\n".join(sorted(set(bad)))


ABOVE_DOMAINS = ("stratagem.evaluation", "stratagem.search", "stratagem.report", "stratagem.cli",
                 "stratagem.agents", "stratagem.context")
"""What a domain never imports: the generic layers that reach domains through the registry."""


def test_domains_import_no_generic_layer_above_them():
    """No package cycle: a domain (its parent side and its worker) imports only core, config,
    store and worker_api (the request protocol and the device lock it shares with the
    evaluator), never the evaluator or anything above it."""
    bad = [
        f"{path.relative_to(SRC)}:{line}: {mod} imports {name}"
        for mod, path, tree in MODULES
        if mod == "stratagem.domains" or mod.startswith("stratagem.domains.")
        for name, line in imported(mod, path, tree)
        if any(name == p or name.startswith(p + ".") for p in ABOVE_DOMAINS)
    ]
    assert not bad, "\n".join(bad)


def test_the_mcp_server_never_imports_the_cli():
    """The two front ends stand side by side: the MCP server reaches the harness and the run
    databases through the library (a run's record: `report/run_json.py`), never by running
    the CLI, not even through a function-local import."""
    bad = [
        f"{path.relative_to(SRC)}:{line}: {mod} imports {name}"
        for mod, path, tree in MODULES
        if mod == "stratagem.mcp" or mod.startswith("stratagem.mcp.")
        for name, line in imported(mod, path, tree)
        if name == "stratagem.cli" or name.startswith("stratagem.cli.")
    ]
    assert not bad, "\n".join(bad)
    tree = ast.parse("def f():\n    from stratagem.cli import main\n")  # the check sees a nested import
    assert any(n == "stratagem.cli" for n, _ in imported("stratagem.mcp.harness", PKG / "mcp" / "harness.py", tree))


def test_an_upward_import_is_caught():
    """The cycle the seams issue found (context importing the search package above it)."""
    tree = ast.parse("from stratagem.search.loop import SearchLoop\nfrom stratagem.core.search import Plan\n")
    found = upward("stratagem.context.render", PKG / "context" / "render.py", tree)
    assert len(found) == 2 and all("stratagem.search.loop" in f for f in found)  # the module and its name


def test_generic_code_asks_the_domain_no_side_door():
    """The Domain seam (`domains/base.py`): no `getattr(domain, ...)` with a default anywhere;
    a capability a domain lacks is None, and generic code asks whether it exists."""
    bad = [f"{path.relative_to(SRC)}:{n.lineno}" for _mod, path, tree in MODULES for n in ast.walk(tree)
           if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" and n.args
           and isinstance(n.args[0], ast.Name) and n.args[0].id in ("domain", "dom", "d")
           and "domain" in path.read_text(encoding="utf-8")]
    assert not bad, "getattr on a domain (ask for the capability instead):\n" + "\n".join(bad)


def _stub(fn: ast.FunctionDef) -> bool:
    """A method that answers nothing: its body (past a docstring) returns a constant None,
    (), [], {}, False or '', or one of its own parameters unchanged."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    v = body[0].value
    params = {a.arg for a in fn.args.args[1:]}
    return (v is None or (isinstance(v, ast.Constant) and not v.value) or (isinstance(v, ast.Name) and v.id in params)
            or (isinstance(v, ast.Tuple | ast.List | ast.Dict) and not (getattr(v, "elts", None) or getattr(v, "keys", None))))


def test_built_in_domains_write_no_stubs():
    """A built-in domain writes what it has: no method of its class or of its `Task` answers
    with nothing (an absent capability is the base class's None, an optional member of `Task`
    the base class's default), and no optional capability is set to an empty stand-in."""
    from stratagem.domains import BUILTIN, get_domain
    from stratagem.domains.base import Task

    optional = ("baselines", "peaks", "reference_facts", "prebuild", "export", "written_reference", "graphs")
    bad: list[str] = []
    for name in BUILTIN:
        cls = type(get_domain(name))
        module = sys.modules[cls.__module__]
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        tasks = {c.__name__ for c in vars(module).values() if isinstance(c, type) and issubclass(c, Task) and c is not Task}
        assert tasks, f"{name}: no Task subclass found in {module.__name__}"
        for node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in {cls.__name__, *tasks}):
            bad += [f"{name}: {node.name}.{f.name}" for f in node.body if isinstance(f, ast.FunctionDef) and _stub(f)]
        bad += [f"{name}: {k} = {v!r}" for k, v in vars(cls).items() if k in optional and not v]
    assert not bad, "stubs in a built-in domain (leave the capability absent):\n" + "\n".join(bad)
    sample = ast.parse("def f(self, req):\n    'doc'\n    return req\n").body[0]
    assert isinstance(sample, ast.FunctionDef) and _stub(sample)
