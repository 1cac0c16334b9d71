"""Owns documentation search for the Analyst: keyword (BM25) and similarity (TF-IDF cosine)
ranking over a folder of text files, fused into one ranking, returning snippets.

Files (`.md`, `.txt`, `.rst`, `.py`, `.cu`, `.cuh`, `.h`, `.html`) are cut into chunks of a few
paragraphs. The keyword ranking is Okapi BM25 over words; the similarity ranking is the cosine
of TF-IDF vectors over words and character 4-grams of words, so `coalesced` also finds
`coalescing`. The two rankings are fused by reciprocal rank. Pure Python; the folder is read
when the index is built (never at import).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from stratagem.domains.base import doc_files

DOC_EXTS = frozenset({".md", ".txt", ".rst", ".py", ".cu", ".cuh", ".h", ".hpp", ".html"})
CHUNK_CHARS = 1_500
SNIPPET_CHARS = 700
RRF_K = 60
"""Reciprocal-rank fusion constant (the usual 60)."""

BM25_K1 = 1.5
BM25_B = 0.75

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by for from has have how i in is it its of on or that the this to "
    "was what when where which who why will with do does can you your we our use using".split()
)

Mode = Literal["hybrid", "keyword", "semantic"]


@dataclass(frozen=True)
class DocChunk:
    path: str
    """Relative to the docs folder."""
    index: int
    """Position of the chunk in its file."""
    text: str


@dataclass(frozen=True)
class DocHit:
    path: str
    index: int
    score: float
    snippet: str


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _features(text: str) -> Counter[str]:
    feats: Counter[str] = Counter()
    for w in words(text):
        feats["w:" + w] += 1
        padded = f"^{w}$"
        for i in range(len(padded) - 3):
            feats["g:" + padded[i : i + 4]] += 1
    return feats


def chunk_text(text: str, max_chars: int = CHUNK_CHARS) -> list[str]:
    """Split a text into chunks of whole paragraphs (a paragraph longer than that is cut)."""
    chunks: list[str] = []
    cur: list[str] = []
    size = 0
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        while len(para) > max_chars:
            chunks.append(para[:max_chars])
            para = para[max_chars:]
        starts_section = para.startswith("#")
        if cur and (size + len(para) > max_chars or starts_section):
            chunks.append("\n\n".join(cur))
            cur, size = [], 0
        cur.append(para)
        size += len(para) + 2
    if cur:
        chunks.append("\n\n".join(cur))
    return chunks


class DocIndex:
    """A searchable set of documentation chunks."""

    def __init__(self, chunks: Sequence[DocChunk]) -> None:
        self.chunks = tuple(chunks)
        self._tokens = [words(f"{c.path} {c.text}") for c in self.chunks]
        self._tf = [Counter(t) for t in self._tokens]
        n = len(self.chunks)
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        self._df = df
        self._avg_len = (sum(len(t) for t in self._tokens) / n) if n else 0.0
        feats = [_features(f"{c.path} {c.text}") for c in self.chunks]
        fdf: Counter[str] = Counter()
        for f in feats:
            fdf.update(f.keys())
        self._fidf = {k: math.log((1 + n) / (1 + v)) + 1 for k, v in fdf.items()}
        self._vectors = [self._tfidf(f) for f in feats]

    @classmethod
    def from_texts(cls, texts: Mapping[str, str], *, chunk_chars: int = CHUNK_CHARS) -> DocIndex:
        """Index the documentation files given (path -> text) of the kinds it reads (`DOC_EXTS`)."""
        chunks: list[DocChunk] = []
        for rel, text in sorted(texts.items()):
            suffix = PurePosixPath(rel).suffix.lower()
            if suffix not in DOC_EXTS:
                continue
            if suffix == ".html":
                text = re.sub(r"<[^>]+>", " ", text)
            chunks += [DocChunk(rel, i, chunk) for i, chunk in enumerate(chunk_text(text, chunk_chars))]
        return cls(chunks)

    @classmethod
    def from_dir(cls, root: Path, *, chunk_chars: int = CHUNK_CHARS) -> DocIndex:
        """Index the text files under `root` (recursively; hidden folders skipped)."""
        return cls.from_texts(doc_files(Path(root), DOC_EXTS), chunk_chars=chunk_chars)

    @classmethod
    def for_problem(cls, docs_dir: Path | None, own: Mapping[str, str]) -> DocIndex | None:
        """The index of `docs_dir`, else of the problem's own documentation (`own`:
        `Domain.documentation`); None when nothing is indexed (no `search_docs` is offered then)."""
        index = cls.from_dir(docs_dir) if docs_dir is not None else cls.from_texts(own)
        return index if len(index) else None

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def files(self) -> list[str]:
        return sorted({c.path for c in self.chunks})

    def _tfidf(self, feats: Counter[str]) -> dict[str, float]:
        vec = {k: (1 + math.log(v)) * self._fidf.get(k, 0.0) for k, v in feats.items()}
        norm = math.sqrt(sum(x * x for x in vec.values())) or 1.0
        return {k: x / norm for k, x in vec.items() if x}

    def keyword(self, query: str) -> list[tuple[int, float]]:
        """BM25 scores of the chunks matching at least one query word, best first."""
        q = set(words(query))
        n = len(self.chunks)
        out = []
        for i, tf in enumerate(self._tf):
            dl = len(self._tokens[i])
            score = 0.0
            for w in q:
                f = tf.get(w, 0)
                if not f:
                    continue
                idf = math.log(1 + (n - self._df[w] + 0.5) / (self._df[w] + 0.5))
                denom = f + BM25_K1 * (1 - BM25_B + BM25_B * dl / (self._avg_len or 1))
                score += idf * f * (BM25_K1 + 1) / denom
            if score > 0:
                out.append((i, score))
        return sorted(out, key=lambda x: (-x[1], x[0]))

    def semantic(self, query: str) -> list[tuple[int, float]]:
        """TF-IDF cosine similarities (words and character 4-grams) above zero, best first."""
        qv = self._tfidf(_features(query))
        out = []
        for i, v in enumerate(self._vectors):
            score = sum(x * v.get(k, 0.0) for k, x in qv.items())
            if score > 0:
                out.append((i, score))
        return sorted(out, key=lambda x: (-x[1], x[0]))

    def search(self, query: str, k: int = 5, mode: Mode = "hybrid") -> list[DocHit]:
        """The `k` best chunks for `query`, with snippets around the matching words."""
        if mode == "keyword":
            ranked = self.keyword(query)
        elif mode == "semantic":
            ranked = self.semantic(query)
        else:
            fused: dict[int, float] = {}
            for ranking in (self.keyword(query), self.semantic(query)):
                for r, (i, _) in enumerate(ranking):
                    fused[i] = fused.get(i, 0.0) + 1.0 / (RRF_K + r + 1)
            ranked = sorted(fused.items(), key=lambda x: (-x[1], x[0]))
        q = set(words(query))
        return [
            DocHit(self.chunks[i].path, self.chunks[i].index, score, snippet(self.chunks[i].text, q))
            for i, score in ranked[:k]
        ]


def snippet(text: str, query_words: set[str], max_chars: int = SNIPPET_CHARS) -> str:
    """The part of `text` around the first query word found (the start when none is)."""
    if len(text) <= max_chars:
        return text
    low = text.lower()
    pos = min((p for w in query_words if (p := low.find(w)) >= 0), default=0)
    start = max(0, min(pos - max_chars // 4, len(text) - max_chars))
    out = text[start : start + max_chars]
    return ("..." if start else "") + out + ("..." if start + max_chars < len(text) else "")


def format_hits(hits: Sequence[DocHit]) -> str:
    """Search results as the Analyst reads them."""
    if not hits:
        return "no matching documentation"
    return "\n\n".join(f"[{i}] {h.path} (part {h.index + 1})\n{h.snippet}" for i, h in enumerate(hits, 1))
