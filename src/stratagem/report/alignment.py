"""Owns the AUTO paper's a-posteriori analyses of a run: the alignment of its choices with
Bayesian optimization, and the clustering of its code (docs/analyses.md says how and why).

- **Embedding.** Each design's source becomes a TF-IDF vector over its code tokens
  (identifiers, numbers, operators; comments dropped), reduced by truncated SVD to at most
  `EMBED_DIMS` dimensions and standardized. The whole run is embedded at once: the analysis
  is a posteriori.
- **Alignment.** Before each iteration t, a Gaussian process (Matern 5/2 plus white noise,
  targets normalized: `search/policies/surrogate.py`, the machinery the tune policy's space
  shares) is fitted to the valid designs of earlier iterations, scored by the log of their
  paired speedup. It sees each design by its code embedding, or, when every design is a point of
  one tune study (tagged with one template and its parameters), by its parameters as the tuner
  sees them (`surrogate.point_features`: a power of two by its exponent; `basis`). Over the pool
  of designs the run visited from t on, each design's expected improvement with exploration
  factor xi is recomputed twice: with the pool's median uncertainty (what its predicted mean
  earns it) and with the pool's median mean (what its uncertainty earns it). A design is
  *exploitative* when its mean earns it more, else *exploratory*; a larger xi makes uncertainty
  worth more. What BO would have done at t is the label of the design BO would sample next among
  every design the run visited from t on (the argmax of EI): the Strategist's choice matches
  when its strategy's kind (innovate and reattempt_failure explore, refine and combine exploit)
  is that label; the Implementors carried out the plan when their design's own label is the
  plan's kind. Search efficiency is the fraction of matches, for each xi.
- **Clusters.** A t-SNE map of the embedding, and consensus clustering: hierarchical (Ward)
  clustering repeated on random subsamples, each cut at the number of clusters with the best
  silhouette, a co-occurrence matrix (how often two designs fell in one cluster when both were
  drawn), and clusters as the connected groups of pairs at or above a threshold. Each cluster is described by its most distinctive tokens and its best design.

Pure functions over design views and iteration records (numpy, scikit-learn); no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from stratagem.core.search import DesignView
from stratagem.search.policies.surrogate import expected_improvement_terms, fit_gp, point_features
from stratagem.search.policies.tune import TAG_PARAMS, TAG_TEMPLATE

EMBED_DIMS = 16
EXACT_TSNE = 1_000
EXPLORE = frozenset({"innovate", "reattempt_failure"})
EXPLOIT = frozenset({"refine", "combine"})
DEFAULT_XI = (0.01, 0.1, 1.0, 10.0)
_TOKEN = r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?|[-+*/@%<>=!&|^~]+"
_COMMENT = re.compile(r"#[^\n]*|//[^\n]*|/\*.*?\*/", re.DOTALL)


def strategy_kind(strategy: str | None) -> str | None:
    """`explore`, `exploit`, or None for strategies of neither kind (PIKE's roles, recipes)."""
    if strategy in EXPLORE:
        return "explore"
    if strategy in EXPLOIT:
        return "exploit"
    return None


def strip_comments(source: str) -> str:
    """The source without its Python comments (strings, inline C++ and CUDA included, kept);
    a source that does not tokenize loses everything after a `#` or `//` on each line."""
    import io
    import tokenize

    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
        return tokenize.untokenize(toks)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _COMMENT.sub(" ", source)


@dataclass(frozen=True)
class Embedding:
    ids: tuple[str, ...]
    vectors: np.ndarray
    """(n, d) standardized."""
    tfidf: np.ndarray
    """(n, vocabulary) dense TF-IDF rows (for describing clusters)."""
    vocabulary: tuple[str, ...]


def embed(designs: Sequence[DesignView], dims: int = EMBED_DIMS) -> Embedding:
    """TF-IDF over code tokens, reduced by truncated SVD and standardized (see the docstring)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [strip_comments(d.source) for d in designs]
    vec = TfidfVectorizer(token_pattern=_TOKEN, lowercase=False, sublinear_tf=True, min_df=1)
    x = vec.fit_transform(texts)
    vocab = tuple(vec.get_feature_names_out())
    n, v = x.shape
    k = max(1, min(dims, n - 1, v - 1))
    if n >= 3 and v >= 3:
        z = TruncatedSVD(n_components=k, random_state=0).fit_transform(x)
    else:
        z = x.toarray()
    z = (z - z.mean(axis=0)) / np.where(z.std(axis=0) > 0, z.std(axis=0), 1.0)
    return Embedding(tuple(d.id for d in designs), np.asarray(z, dtype=float), x.toarray(), vocab)


@dataclass(frozen=True)
class Label:
    design_id: str
    iteration: int
    xi: float
    ei: float
    exploit_term: float
    """Its EI with the pool's median uncertainty (what its predicted mean earns)."""
    explore_term: float
    """Its EI with the pool's median mean (what its uncertainty earns)."""

    @property
    def kind(self) -> str:
        return "explore" if self.explore_term > self.exploit_term else "exploit"


@dataclass(frozen=True)
class IterationAlignment:
    iteration: int
    xi: float
    strategy: str | None
    intended: str | None
    """The strategy's kind (None: a policy without strategies)."""
    bo_choice: str | None
    """The kind of the design BO would sample next (None: too few points to fit)."""
    labels: tuple[Label, ...]

    @property
    def strategist_match(self) -> bool | None:
        if self.intended is None or self.bo_choice is None:
            return None
        return self.intended == self.bo_choice

    def implementor_matches(self) -> list[bool]:
        return [lab.kind == self.intended for lab in self.labels] if self.intended else []


@dataclass(frozen=True)
class Efficiency:
    xi: float
    iterations: int
    """Iterations with a fitted surrogate and a strategy of a known kind."""
    strategist: float | None
    """Fraction of those where the Strategist's kind matched BO's choice."""
    implementor: float | None
    """Fraction of their designs whose label matched the plan's kind."""
    explore_share: float | None
    """Fraction of labelled designs that were exploratory (every policy)."""
    labelled: int = 0


@dataclass(frozen=True)
class Alignment:
    xis: tuple[float, ...]
    per_iteration: tuple[IterationAlignment, ...]
    efficiency: tuple[Efficiency, ...]
    note: str = ""
    basis: str = "code"
    """What the surrogate was fitted over: `code` (the TF-IDF embedding of the designs' code) or
    `params` (the template's parameters: every design a point of one tune study)."""


def param_features(designs: Sequence[DesignView]) -> np.ndarray | None:
    """The designs as points of one template's space (`surrogate.point_features`), when every
    one of them is a point the tune policy evaluated (tagged with one template's id and its
    `params`); None otherwise (agents' designs, several templates)."""
    templates = {d.tags.get(TAG_TEMPLATE) for d in designs}
    raws = [d.tags.get(TAG_PARAMS) for d in designs]
    if not designs or len(templates) != 1 or None in templates or not all(isinstance(r, dict) and r for r in raws):
        return None
    points = [{str(k): (v if isinstance(v, int | float | str) else str(v)) for k, v in r.items()}
              for r in raws if isinstance(r, dict)]
    try:
        return point_features(points)
    except ValueError:
        return None


def align(designs: Sequence[DesignView], plans: Mapping[int, str | None],
          xis: Sequence[float] = DEFAULT_XI, emb: Embedding | None = None) -> Alignment:
    """The alignment of a run with BO (see the module docstring). `plans`: iteration ->
    the strategy its plan chose (None or absent for policies without strategies)."""
    designs = [d for d in designs if d.iteration is not None]
    if len(designs) < 3:
        return Alignment(tuple(xis), (), tuple(Efficiency(x, 0, None, None, None) for x in xis),
                         "too few designs to fit a surrogate (3 are needed)")
    feats = param_features(designs)
    if feats is not None:
        ids, vectors, basis = tuple(d.id for d in designs), feats, "params"
    else:
        emb = emb or embed(designs)
        ids, vectors, basis = emb.ids, emb.vectors, "code"
    row = {i: k for k, i in enumerate(ids)}
    iters = sorted({int(d.iteration) for d in designs if d.iteration is not None})
    out: list[IterationAlignment] = []
    for t in iters:
        known = [d for d in designs if (d.iteration or 0) < t and d.speedup is not None and d.speedup > 0]
        now = [d for d in designs if d.iteration == t and d.id in row]
        if len(known) < 2 or not now:
            continue
        x = vectors[[row[d.id] for d in known]]
        y = np.log(np.array([float(d.speedup or 1.0) for d in known]))
        gp = fit_gp(x, y)
        pool = [d for d in designs if (d.iteration or 0) >= t and d.id in row]
        xp = vectors[[row[d.id] for d in pool]]
        mu, sd = gp.predict(xp, return_std=True)
        best = float(y.max())
        idx = {d.id: k for k, d in enumerate(pool)}
        mu_med, sd_med = float(np.median(mu)), float(np.median(sd))
        for xi in xis:
            ei = np.sum(expected_improvement_terms(mu, sd, best, xi), axis=0)
            # what each point's EI would be with a typical uncertainty (its mean earns it) and
            # with a typical mean (its uncertainty earns it)
            by_mean = np.sum(expected_improvement_terms(mu, np.full_like(sd, sd_med), best, xi), axis=0)
            by_sd = np.sum(expected_improvement_terms(np.full_like(mu, mu_med), sd, best, xi), axis=0)
            pick = int(np.argmax(ei))
            choice = "explore" if by_sd[pick] > by_mean[pick] else "exploit"
            labels = tuple(Label(d.id, t, xi, float(ei[idx[d.id]]), float(by_mean[idx[d.id]]),
                                 float(by_sd[idx[d.id]])) for d in now)
            strategy = plans.get(t)
            out.append(IterationAlignment(t, xi, strategy, strategy_kind(strategy), choice, labels))
    eff = []
    for xi in xis:
        rows = [r for r in out if r.xi == xi]
        judged = [r for r in rows if r.strategist_match is not None]
        impl = [m for r in judged for m in r.implementor_matches()]
        labs = [lab for r in rows for lab in r.labels]
        eff.append(Efficiency(
            xi, len(judged),
            sum(bool(r.strategist_match) for r in judged) / len(judged) if judged else None,
            sum(impl) / len(impl) if impl else None,
            sum(lab.kind == "explore" for lab in labs) / len(labs) if labs else None, len(labs)))
    note = "" if out else "no iteration had two valid designs before it to fit a surrogate"
    return Alignment(tuple(xis), tuple(out), tuple(eff), note, basis)


# -- clusters -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    label: str
    ids: tuple[str, ...]
    best_id: str | None
    best_speedup: float | None
    tokens: tuple[str, ...]
    """Its most distinctive code tokens (mean TF-IDF inside minus outside)."""


@dataclass(frozen=True)
class Clustering:
    ids: tuple[str, ...]
    map2d: np.ndarray
    """(n, 2) t-SNE coordinates."""
    cooccurrence: np.ndarray
    threshold: float
    clusters: tuple[Cluster, ...]
    assignment: dict[str, str] = field(default_factory=dict)
    note: str = ""


def _best_cut(z: np.ndarray, x: np.ndarray, k_range: tuple[int, int]) -> np.ndarray:
    """The labels of the cut of linkage `z` (of the points `x`) with the best silhouette, k in
    `k_range`; all zeros when no cut makes two clusters."""
    from scipy.cluster.hierarchy import fcluster
    from sklearn.metrics import silhouette_score

    best_lab, best_s = np.zeros(len(x), dtype=int), -2.0
    for k in range(k_range[0], min(k_range[1], len(x) - 1) + 1):
        lab = fcluster(z, k, criterion="maxclust")
        if len(set(lab)) < 2:
            continue
        sc = float(silhouette_score(x, lab))
        if sc > best_s:
            best_lab, best_s = lab, sc
    return best_lab


def consensus_clusters(emb: Embedding, *, runs: int = 60, k_range: tuple[int, int] = (2, 8),
                       subsample: float = 0.8, threshold: float = 0.5, seed: int = 0) -> tuple[np.ndarray, list[list[int]]]:
    """(co-occurrence matrix, clusters as index lists): `runs` random subsamples, each
    clustered hierarchically (Ward) and cut at the k in `k_range` with the best silhouette;
    two designs co-occur when both were drawn and fell in one cluster; clusters are the
    connected groups of pairs co-occurring at least `threshold`."""
    from scipy.cluster.hierarchy import linkage

    n = len(emb.ids)
    rng = np.random.default_rng(seed)
    same = np.zeros((n, n))
    drawn = np.zeros((n, n))
    for _ in range(runs):
        m = max(3, int(round(subsample * n)))
        idx = np.sort(rng.choice(n, size=min(m, n), replace=False))
        x = emb.vectors[idx] + rng.normal(0.0, 1e-9, size=emb.vectors[idx].shape)  # ties broken
        z = linkage(x, method="ward")
        best_lab = _best_cut(z, x, k_range)
        eq = (best_lab[:, None] == best_lab[None, :]).astype(float)
        same[np.ix_(idx, idx)] += eq
        drawn[np.ix_(idx, idx)] += 1.0
    co = np.divide(same, drawn, out=np.zeros_like(same), where=drawn > 0)
    np.fill_diagonal(co, 1.0)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if co[i, j] >= threshold:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return co, sorted(groups.values(), key=lambda g: (-len(g), g[0]))


def cluster(designs: Sequence[DesignView], *, threshold: float = 0.5, seed: int = 0,
            emb: Embedding | None = None) -> Clustering:
    """t-SNE map and consensus clusters of a run's designs, each cluster described."""
    if len(designs) < 4:
        return Clustering(tuple(d.id for d in designs), np.zeros((len(designs), 2)), np.eye(len(designs)),
                          threshold, (), {}, "too few designs to cluster (4 are needed)")
    from sklearn.manifold import TSNE

    emb = emb or embed(designs)
    n = len(emb.ids)
    if np.allclose(emb.vectors, emb.vectors[0]):
        return Clustering(emb.ids, np.zeros((n, 2)), np.ones((n, n)), threshold, (), {},
                          "every design's code is the same once comments are dropped: one family, nothing to map")
    # exact gradients up to EXACT_TSNE designs: Barnes-Hut's OpenMP code crashed (SIGSEGV) in a
    # process that had loaded torch's OpenMP runtime, and the exact method is fast at this size
    map2d = TSNE(n_components=2, perplexity=max(1.0, min(30.0, (n - 1) / 3)), init="pca", random_state=seed,
                 method="exact" if n <= EXACT_TSNE else "barnes_hut").fit_transform(emb.vectors)
    co, groups = consensus_clusters(emb, threshold=threshold, seed=seed)
    by_id = {d.id: d for d in designs}
    out = []
    assignment = {}
    for g_i, g in enumerate(groups):
        label = chr(ord("A") + g_i) if g_i < 26 else f"C{g_i}"
        ids = tuple(emb.ids[i] for i in g)
        for i in ids:
            assignment[i] = label
        inside = emb.tfidf[g].mean(axis=0)
        rest = [i for i in range(n) if i not in g]
        outside = emb.tfidf[rest].mean(axis=0) if rest else np.zeros_like(inside)
        top = np.argsort(-(inside - outside))[:6]
        tokens = tuple(emb.vocabulary[t] for t in top if inside[t] - outside[t] > 0)
        scored = [by_id[i] for i in ids if by_id[i].speedup is not None]
        best = max(scored, key=lambda v: v.speedup or 0.0) if scored else None
        out.append(Cluster(label, ids, best.id if best else None, best.speedup if best else None, tokens))
    return Clustering(emb.ids, np.asarray(map2d), co, threshold, tuple(out), assignment)


def efficiency_rows(a: Alignment) -> list[list[str]]:
    """The alignment's summary as table rows: xi, iterations judged, the two efficiencies, the
    exploratory share."""
    def pct(x: float | None) -> str:
        return "-" if x is None or math.isnan(x) else f"{100 * x:.0f}%"

    return [[f"{e.xi:g}", str(e.iterations), pct(e.strategist), pct(e.implementor), pct(e.explore_share),
             str(e.labelled)] for e in a.efficiency]
