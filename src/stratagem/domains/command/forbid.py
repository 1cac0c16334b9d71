"""Owns the forbidden-dependency checks of a command design: on its sources (the declared
regexes, a forbidden library named on a link line, `dlopen`), on the build command's link
line, and on every ELF file its build made (direct and transitive shared libraries by
`readelf -d` and `ldd`, defined and imported symbols by `nm`, `dlopen` imports, library names
in its strings). Standard library only: the binary checks run in the worker."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from stratagem.domains.command.spec import Forbidden

DLOPEN = ("dlopen", "dlmopen", "__libc_dlopen_mode")
TOOL_TIMEOUT_S = 30.0


def _lib_pattern(lib: str) -> re.Pattern[str]:
    """`-lNAME` (also `-l NAME`, `-Wl,-lNAME`) or `libNAME.so` / `libNAME.a` in text."""
    e = re.escape(lib)
    return re.compile(rf"(?<![\w])-l\s*{e}(?![\w+-])|\blib{e}\.(?:so|a)\b|-l:lib{e}\.")


def link_findings(text: str, forbid: Forbidden, where: str) -> list[str]:
    """A forbidden library named on a link line (or anywhere in `text`)."""
    return [f"{where} links the forbidden library {lib!r} ({m.group(0).strip()!r})"
            for lib in forbid.libraries if (m := _lib_pattern(lib).search(text))]


def source_findings(files: Mapping[str, str], forbid: Forbidden) -> list[str]:
    """What a design's files say that the problem forbids: its source patterns, a forbidden
    library on a link line, `dlopen` when not allowed."""
    out = []
    for name, text in sorted(files.items()):
        for pattern in forbid.sources:
            m = re.search(pattern, text, re.MULTILINE)
            if m:
                line = text.count("\n", 0, m.start()) + 1
                out.append(f"{name}:{line}: {m.group(0).strip()!r} matches the forbidden source pattern {pattern!r}")
        out += link_findings(text, forbid, name)
        if not forbid.allow_dlopen:
            m = re.search(r"\b(dlopen|dlmopen|dlsym)\b", text)
            if m:
                out.append(f"{name}: calls {m.group(1)} (loading libraries at run time is forbidden here)")
    return out


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_files(root: Path, before: Iterable[Path] = ()) -> list[Path]:
    """ELF files under `root` (not links), except those in `before`."""
    old = {p.resolve() for p in before}
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)
                  and p.resolve() not in old)


def _tool(args: list[str]) -> str:
    """A binary tool's stdout ('' when it has nothing to say, e.g. `nm` on a stripped file).

    Raises:
        FileNotFoundError: the tool is not installed.
    """
    if shutil.which(args[0]) is None:
        raise FileNotFoundError(f"{args[0]} is not installed: the binary checks cannot run")
    try:
        p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=TOOL_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ""
    return p.stdout


def lib_name(soname: str) -> str:
    """`libm.so.6` -> `m`, `libcublas.so.12` -> `cublas`, `/x/libfoo.a` -> `foo`."""
    base = soname.rsplit("/", 1)[-1]
    base = base[3:] if base.startswith("lib") else base
    return re.split(r"\.(?:so|a)\b", base, maxsplit=1)[0]


def needed(path: Path) -> tuple[list[str], list[str]]:
    """(direct NEEDED entries, every shared library `ldd` resolves: transitive ones too)."""
    direct = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _tool(["readelf", "-d", str(path)]))
    every = []
    if direct:
        for line in _tool(["ldd", str(path)]).splitlines():
            s = line.strip().split(" ", 1)[0]
            if s and ".so" in s:
                every.append(s)
    return direct, every


def symbols(path: Path) -> tuple[set[str], set[str]]:
    """(dynamic imports, every symbol the file names: defined, imported, static), versions cut."""
    def names(text: str) -> set[str]:
        out = set()
        for line in text.splitlines():
            parts = line.split()
            if parts:
                out.add(parts[-1].split("@", 1)[0])
        return out
    imports = names(_tool(["nm", "-D", "--undefined-only", str(path)]))
    every = imports | names(_tool(["nm", "-D", str(path)])) | names(_tool(["nm", str(path)]))
    return imports, every


def binary_findings(path: Path, forbid: Forbidden, shown: str) -> list[str]:
    """What the binary at `path` depends on that the problem forbids.

    Raises:
        FileNotFoundError: readelf, ldd or nm is not installed.
    """
    out = _library_findings(path, set(forbid.libraries), shown) if forbid.libraries else []
    if forbid.symbols or not forbid.allow_dlopen:
        out += _symbol_findings(path, forbid, shown)
    return out


def _library_findings(path: Path, banned: set[str], shown: str) -> list[str]:
    """The forbidden libraries the binary needs, loads through another library, or names."""
    direct, every = needed(path)
    out = [f"{shown} needs the forbidden library {so}" for so in direct if lib_name(so) in banned]
    out += [f"{shown} loads the forbidden library {so} through another library"
            for so in every if lib_name(so) in banned and so not in direct]
    try:
        blob = path.read_bytes()
    except OSError:
        blob = b""
    return out + [f"{shown} holds the name of the forbidden library lib{lib}.so (a dlopen target?)"
                  for lib in sorted(banned) if re.search(rb"lib" + re.escape(lib.encode()) + rb"\.(?:so|a)\b", blob)]


def _symbol_findings(path: Path, forbid: Forbidden, shown: str) -> list[str]:
    """The forbidden symbols the binary uses, and its run-time loader imports where forbidden."""
    imports, every_sym = symbols(path)
    out = [f"{shown} uses the forbidden symbol {hit[0]} (pattern {pattern!r})" for pattern in forbid.symbols
           if (hit := sorted(s for s in every_sym if fnmatch.fnmatchcase(s, pattern)))]
    hit = [] if forbid.allow_dlopen else sorted(s for s in imports if s in DLOPEN)
    if hit:
        out.append(f"{shown} imports {hit[0]}: loading libraries at run time is forbidden here")
    return out
