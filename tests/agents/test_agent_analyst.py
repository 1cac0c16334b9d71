"""The Analyst's tools (read, diff, doc search), the work directory sandbox, and the review."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path

import pytest
from agent_fakes import FakeSession, call_tool, output, runtime, scripted, text, tool_returns
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo

from stratagem.agents.analyst import (
    AnalystDeps,
    ask_analyst,
    designs_by_id,
    diff_text,
    find_design,
    review_design,
)
from stratagem.agents.docs import DocIndex, chunk_text
from stratagem.agents.tools import Workdir, WorkdirError
from stratagem.context import render
from stratagem.core.search import DesignView

A = DesignView("a1b2c3d4" + "0" * 56, "x = 1\ny = 2\n", "valid", runtime_ms=1.0, speedup=2.0)
B = DesignView("b1b2c3d4" + "0" * 56, "x = 1\ny = 3\n", "invalid", report="[load] boom")


def write_docs(root: Path) -> None:
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "memory.md").write_text(
        "# Global memory\n\nCoalesced accesses: consecutive threads of a warp should read "
        "consecutive addresses so loads coalesce into few transactions.\n\n"
        "# Registers\n\nEach thread has a limited number of registers.\n")
    (root / "guide" / "sync.md").write_text(
        "# Synchronization\n\n__syncthreads() is a barrier for all threads of a block.\n")
    (root / "triton.txt").write_text(
        "Triton kernels use tl.load and tl.store with masks; BLOCK_SIZE is a constexpr.\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("coalescing secrets")


def test_doc_search_ranks_the_relevant_doc_first(tmp_path: Path) -> None:
    write_docs(tmp_path)
    idx = DocIndex.from_dir(tmp_path)
    assert ".hidden/secret.md" not in idx.files
    for mode in ("hybrid", "keyword", "semantic"):
        hits = idx.search("how do memory loads coalesce across a warp", mode=mode)
        assert hits and hits[0].path == "guide/memory.md", (mode, hits)
    # similarity ranking matches word forms the keyword ranking misses
    assert idx.search("coalescing", mode="semantic")[0].path == "guide/memory.md"
    assert idx.search("triton masks", k=1)[0].path == "triton.txt"
    assert idx.search("barrier syncthreads", k=1)[0].path == "guide/sync.md"


def test_chunking_keeps_sections_apart() -> None:
    chunks = chunk_text("# A\n\none\n\n# B\n\ntwo\n\n" + "x" * 50, max_chars=1000)
    assert chunks[0].startswith("# A") and chunks[1].startswith("# B")


def analyst_deps(tmp_path: Path, docs: DocIndex | None = None) -> AnalystDeps:
    return AnalystDeps(workdir=Workdir(tmp_path / "work"), designs=designs_by_id([A, B]), docs=docs, domain="pytorch")


def test_analyst_tools_read_diff_and_search(tmp_path: Path) -> None:
    write_docs(tmp_path / "docs")
    deps = analyst_deps(tmp_path, DocIndex.from_dir(tmp_path / "docs"))
    results: dict[str, list[str]] = {}

    def final(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        for name in ("read_design", "diff_designs", "search_docs"):
            results[name] = tool_returns(m, name)
        results["offered"] = sorted(t.name for t in i.function_tools)
        return text("A differs from B in y")

    model = scripted(
        lambda m, i: call_tool("read_design", {"design_id": "b1b2c3"}),
        lambda m, i: call_tool("diff_designs", {"a": "a1b2c3d4", "b": "b1b2c3d4"}),
        lambda m, i: call_tool("search_docs", {"query": "coalesced warp loads"}),
        final,
    )
    rt = runtime({"analyst": model})
    answer = asyncio.run(ask_analyst("how do A and B differ?", deps, rt))
    assert answer == "A differs from B in y"
    assert "[load] boom" in results["read_design"][0] and "y = 3" in results["read_design"][0]
    assert "-y = 2" in results["diff_designs"][0] and "+y = 3" in results["diff_designs"][0]
    assert results["search_docs"][0].startswith("[1] guide/memory.md")
    # only the tools it has a use for (issue 24): no work directory or scratchpad
    assert results["offered"] == ["compare_designs", "diff_designs", "read_design", "search_docs"]


def test_analyst_failure_is_an_answer_not_an_exception(tmp_path: Path) -> None:
    def boom(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        raise RuntimeError("model crashed")

    rt = runtime({"analyst": scripted(boom)})
    answer = asyncio.run(ask_analyst("q", analyst_deps(tmp_path), rt))
    assert answer.startswith("The Analyst could not answer")


def test_find_design_and_diff() -> None:
    designs = designs_by_id([A, B])
    assert find_design(designs, A.id[:6]) is A
    assert "unknown" in find_design(designs, "zzzzzzzz")  # type: ignore[operator]
    assert "at least" in find_design(designs, "a1")  # type: ignore[operator]
    assert diff_text(A, A) == "the two designs have identical sources"


def test_review_returns_a_verdict(tmp_path: Path) -> None:
    session = FakeSession()
    model = scripted(lambda m, i: output(i, {"cheating": True,
                                             "reason": "caches the output in self._out"}))
    rt = runtime({"review": model}).recording(session.record_call)
    brief = render.ProblemBrief("p", "class Model: ...", domain="pytorch")
    review = asyncio.run(review_design(A, analyst_deps(tmp_path), rt, problem=brief))
    assert review.cheating and "caches" in review.reason
    assert [c.role for c in session.calls] == ["analyst"]


def test_failed_review_is_not_a_cheating_verdict(tmp_path: Path) -> None:
    rt = runtime({"review": scripted(lambda m, i: text("no structured answer"))})
    brief = render.ProblemBrief("p", "class Model: ...", domain="pytorch")
    review = asyncio.run(review_design(A, analyst_deps(tmp_path), rt, problem=brief))
    assert review.failed and not review.cheating and review.reason.startswith("review failed")


# -- the work directory ----------------------------------------------------------------------


def test_workdir_confines_paths(tmp_path: Path) -> None:
    wd = Workdir(tmp_path / "wd")
    assert wd.write("sub/a.txt", "hello") == 5
    assert wd.read("sub/a.txt") == "hello"
    assert wd.list() == ["sub/", "sub/a.txt"]
    for bad in ("/etc/passwd", "../x", "sub/../../x", "~/x", ""):
        with pytest.raises(WorkdirError):
            wd.resolve(bad)
    with pytest.raises(WorkdirError):
        wd.read("missing.txt")


def test_workdir_rejects_symlinks_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret")
    wd = Workdir(tmp_path / "wd")
    wd.write("ok.txt", "fine")
    os.symlink(outside, tmp_path / "wd" / "link")
    os.symlink(outside / "secret.txt", tmp_path / "wd" / "file_link")
    with pytest.raises(WorkdirError):
        wd.read("link/secret.txt")
    with pytest.raises(WorkdirError):
        wd.read("file_link")
    with pytest.raises(WorkdirError):
        wd.write("link/new.txt", "x")
    assert not (outside / "new.txt").exists()
    assert wd.list() == ["ok.txt"]  # links are not listed


def test_docs_for_problem_prefers_the_configured_folder(tmp_path: Path) -> None:
    from stratagem.core.problem import Problem
    from stratagem.domains import get_domain

    def own(path: Path) -> dict[str, str]:
        return get_domain("pytorch").documentation(Problem("p", "pytorch", "", str(path)))

    write_docs(tmp_path / "prob" / "docs")
    (tmp_path / "prob" / "problem.py").write_text("class Model: ...\n")
    idx = DocIndex.for_problem(None, own(tmp_path / "prob" / "problem.py"))
    assert idx is not None and "triton.txt" in idx.files and ".hidden/secret.md" not in idx.files
    assert DocIndex.for_problem(None, own(tmp_path / "problem.py")) is None
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.md").write_text("# X\n\nwarp shuffles\n")
    idx = DocIndex.for_problem(other, own(tmp_path / "prob" / "problem.py"))
    assert idx is not None and idx.files == ["x.md"]
    # a folder with nothing it can index is no documentation: no index, so no `search_docs`
    (tmp_path / "empty" / "docs").mkdir(parents=True)
    (tmp_path / "empty" / "docs" / "blob.bin").write_bytes(b"\0\1")
    assert DocIndex.for_problem(None, own(tmp_path / "empty" / "problem.py")) is None


def test_a_command_problem_s_own_docs_are_what_its_analyst_searches(tmp_path: Path) -> None:
    """A command problem's path is its folder: its docs are the bundle's `docs` folder (the
    index once looked for a `docs/` beside the folder and found none, or another problem's)."""
    from stratagem.domains import get_domain

    root = Path(__file__).resolve().parents[2] / "examples" / "command" / "window_sums"
    problem = get_domain("command").load_problem(root)
    idx = DocIndex.for_problem(None, get_domain("command").documentation(problem))
    assert idx is not None and idx.files == ["docs/background.md"]
    assert not (root.parent / "docs").exists()  # where the index used to look


def offered_to(build, deps: AnalystDeps, prompt: str = "q") -> tuple[list[str], str]:
    """The tools a scripted model is offered and the instructions it is given."""
    seen: dict[str, object] = {}

    def answer(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen["tools"] = sorted(t.name for t in i.function_tools)
        seen["system"] = str(getattr(i, "instructions", "") or "")
        return output(i, {"cheating": False, "reason": "fine"}) if i.output_tools else text("an answer")

    asyncio.run(build(model=scripted(answer)).run(prompt, deps=deps))
    return seen["tools"], str(seen["system"])  # type: ignore[return-value]


@pytest.mark.parametrize("role", ["analyst", "reviewer"])
def test_search_docs_is_offered_and_named_only_where_there_are_docs(tmp_path: Path, role: str) -> None:
    """Issue 58: on problems without docs, Analysts spent a query on `search_docs`."""
    from stratagem.agents.analyst import build_analyst, build_reviewer, has_docs

    write_docs(tmp_path / "docs")
    for docs in (None, DocIndex.from_dir(tmp_path / "docs")):
        deps = analyst_deps(tmp_path, docs)
        maker = build_analyst if role == "analyst" else build_reviewer
        build = functools.partial(maker, domain="pytorch", docs=has_docs(docs))
        tools, told = offered_to(build, deps)
        assert ("search_docs" in tools) == (docs is not None), (role, tools)
        assert ("search_docs" in told) == (docs is not None), (role, told)
    assert not has_docs(None) and not has_docs(DocIndex.from_texts({}))


def test_the_analyst_s_prompt_and_the_strategist_name_docs_only_where_there_are_some(tmp_path: Path) -> None:
    from stratagem.agents.strategist import build_strategist

    write_docs(tmp_path / "docs")
    prompts: list[str] = []

    def answer(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        prompts.append("\n".join(str(getattr(p, "content", "")) for msg in m for p in msg.parts))
        return text("an answer")

    for docs in (None, DocIndex.from_dir(tmp_path / "docs")):
        prompts.clear()
        asyncio.run(ask_analyst("q", analyst_deps(tmp_path, docs), runtime({"analyst": scripted(answer)})))
        assert ("search_docs" in prompts[0]) == (docs is not None) and ("memory.md" in prompts[0]) == (docs is not None)
    for docs in (False, True):
        agent = build_strategist(analyst=True, domain="pytorch", docs=docs)
        told = render.instructions("strategist", domain="pytorch", analyst=True, docs=docs)
        tool = agent._function_toolset.tools["ask_analyst"].tool_def.description or ""  # noqa: SLF001
        assert ("documentation" in told) == docs and ("documentation" in tool) == docs, (docs, tool)


