"""Owns PIKE-O's program database: islands, each with its population and MAP-Elites feature
grid, one elite archive, parent and inspiration sampling, and migration between islands, as
the authors' OpenEvolve fork (0.2.8, `openevolve/database.py`) keeps them.

It is plain data (`to_json` / `from_json`), saved by the policy after every change, so a
killed run resumes with the same islands, archive and grid. Fitness is the paired speedup over
the reference (higher is better). The grid's two features are code size (characters, binned against
`size_scale`, four times the reference's length) and diversity (the mean difference of the
program's code from the archive's, 1 - difflib's ratio, in [0, 1]). A cell keeps its fittest
program; a population over `population_size` drops its least fit program that is neither in
the archive nor a cell's owner.
"""

from __future__ import annotations

import difflib
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from stratagem.search.policies.pike_settings import PikeOSettings

DIVERSITY_REFS = 5
"""Archive programs a new program's diversity is measured against."""


@dataclass
class Entry:
    id: str
    fitness: float
    size: int
    diversity: float
    island: int
    migrant: bool = False
    """Copied in by migration (migrants do not migrate again)."""


@dataclass
class Island:
    members: list[str] = field(default_factory=list)
    grid: dict[str, str] = field(default_factory=dict)
    """`"size_bin,diversity_bin"` -> the id of the cell's fittest program."""
    generation: int = 0
    """Programs added to this island (its children); migration is due every `migration_interval`."""
    last_migration: int = 0


@dataclass
class ProgramDB:
    settings: PikeOSettings
    size_scale: int
    entries: dict[str, Entry] = field(default_factory=dict)
    """(island, id) -> entry, keyed `"island:id"` (a migrant is one entry per island)."""
    islands: list[Island] = field(default_factory=list)
    archive: list[str] = field(default_factory=list)
    """Ids of the elite archive, fittest first."""
    sources: dict[str, str] = field(default_factory=dict)
    """id -> code, for the diversity measure (not persisted: rebuilt from the stored designs)."""

    def __post_init__(self) -> None:
        if not self.islands:
            self.islands = [Island() for _ in range(self.settings.num_islands)]

    # -- persistence ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"size_scale": self.size_scale, "entries": {k: asdict(e) for k, e in self.entries.items()},
                "islands": [asdict(i) for i in self.islands], "archive": list(self.archive)}

    @classmethod
    def from_json(cls, data: dict[str, Any], settings: PikeOSettings, sources: dict[str, str]) -> ProgramDB:
        db = cls(settings, int(data["size_scale"]), {k: Entry(**e) for k, e in data["entries"].items()},
                 [Island(**i) for i in data["islands"]], list(data["archive"]), dict(sources))
        while len(db.islands) < settings.num_islands:  # a resumed run given more islands
            db.islands.append(Island())
        return db

    # -- features ---------------------------------------------------------------------------

    def cell(self, size: int, diversity: float) -> str:
        bins = self.settings.feature_bins
        sb = min(bins - 1, int(bins * size / max(1, self.size_scale)))
        db = min(bins - 1, int(bins * max(0.0, min(1.0, diversity))))
        return f"{sb},{db}"

    def diversity(self, source: str) -> float:
        refs = [self.sources[i] for i in self.archive[:DIVERSITY_REFS] if i in self.sources]
        if not refs:
            return 0.0
        return sum(1.0 - difflib.SequenceMatcher(None, source, r, autojunk=False).quick_ratio()
                   for r in refs) / len(refs)

    def entry(self, island: int, pid: str) -> Entry | None:
        return self.entries.get(f"{island}:{pid}")

    # -- adding -----------------------------------------------------------------------------

    def add(self, pid: str, source: str, fitness: float, island: int) -> Entry:
        """A valid child joins `island` (its population, its grid cell if fitter than the
        owner, the archive if it is among the fittest); the island's generation advances."""
        isl = self.islands[island]
        self.sources[pid] = source
        e = Entry(pid, fitness, len(source), self.diversity(source), island)
        self._place(e)
        isl.generation += 1
        self._archive(pid, fitness)
        return e

    def _place(self, e: Entry) -> None:
        isl = self.islands[e.island]
        key = f"{e.island}:{e.id}"
        if key in self.entries:
            return
        self.entries[key] = e
        isl.members.append(e.id)
        cell = self.cell(e.size, e.diversity)
        owner = isl.grid.get(cell)
        owner_e = self.entry(e.island, owner) if owner else None
        if owner_e is None or e.fitness > owner_e.fitness:
            isl.grid[cell] = e.id
        self._cap(e.island)

    def _archive(self, pid: str, fitness: float) -> None:
        if pid in self.archive:
            return
        fit = self._fitness
        self.archive.append(pid)
        self.archive.sort(key=lambda i: -fit(i))
        del self.archive[self.settings.archive_size:]

    def _fitness(self, pid: str) -> float:
        return max((e.fitness for e in self.entries.values() if e.id == pid), default=0.0)

    def _cap(self, island: int) -> None:
        isl = self.islands[island]
        while len(isl.members) > self.settings.population_size:
            protected = set(self.archive) | set(isl.grid.values())
            victims = [m for m in isl.members if m not in protected]
            if not victims:
                return
            worst = min(victims, key=lambda m: self.entries[f"{island}:{m}"].fitness)
            isl.members.remove(worst)
            del self.entries[f"{island}:{worst}"]

    # -- sampling ---------------------------------------------------------------------------

    def draw_parent(self, island: int, rng: random.Random) -> tuple[str | None, str]:
        """A parent for a child of `island` and how it was drawn: with `exploration_ratio` a
        random member of the island, with `exploitation_ratio` a random archive program (the
        island's own first), else a random program of the whole population; None (the original
        program) while the island has nothing."""
        s = self.settings
        members = self.islands[island].members
        everyone = sorted({e.id for e in self.entries.values()})
        u = rng.random()
        if u < s.exploitation_ratio and self.archive:
            own = [a for a in self.archive if a in members]
            return rng.choice(own or self.archive), ("exploitation: a random program of the elite archive"
                                                    + (f" (island {island}'s own)" if own else ""))
        if u < s.exploitation_ratio + s.exploration_ratio or not everyone:
            if members:
                return rng.choice(members), f"exploration: a random program of island {island}"
            if everyone:
                return rng.choice(everyone), f"exploration: a random program of the run (island {island} has none)"
            return None, "nothing is measured yet"
        return rng.choice(everyone), "a random program of the whole population"

    def inspirations(self, island: int, parent: str | None, rng: random.Random) -> list[str]:
        """Up to `num_inspirations` programs of `island` besides the parent: its best, the top
        `elite_selection_ratio` share, programs of nearby grid cells (within 2 bins), then random."""
        n = self.settings.num_inspirations
        isl = self.islands[island]
        pool = [m for m in isl.members if m != parent]
        if n <= 0 or not pool:
            return []
        by_fit = sorted(pool, key=lambda m: -self.entries[f"{island}:{m}"].fitness)
        out: list[str] = [by_fit[0]]
        top = by_fit[: max(1, int(len(by_fit) * self.settings.elite_selection_ratio))]
        out += [m for m in top if m not in out]
        pe = self.entry(island, parent) if parent else None
        if pe is not None:
            sb, db = (int(x) for x in self.cell(pe.size, pe.diversity).split(","))
            near = [pid for c, pid in sorted(isl.grid.items())
                    if abs(int(c.split(",")[0]) - sb) <= 2 and abs(int(c.split(",")[1]) - db) <= 2]
            out += [m for m in near if m not in out and m != parent]
        rest = [m for m in pool if m not in out]
        rng.shuffle(rest)
        return (out + rest)[:n]

    def top(self, island: int, n: int) -> list[str]:
        members = self.islands[island].members
        return sorted(members, key=lambda m: -self.entries[f"{island}:{m}"].fitness)[:n]

    def best(self) -> str | None:
        return self.archive[0] if self.archive else None

    # -- migration --------------------------------------------------------------------------

    def migrate_due(self) -> list[tuple[str, int, int]]:
        """Migrate every island whose generation has advanced `migration_interval` since its last
        migration: its fittest `migration_rate` share (at least one, no migrants) is copied to its
        two ring neighbours, skipping programs already there. Returns (id, from, to) moves."""
        s = self.settings
        k = len(self.islands)
        moves: list[tuple[str, int, int]] = []
        if k < 2:
            return moves
        for i, isl in enumerate(self.islands):
            if isl.generation - isl.last_migration < s.migration_interval:
                continue
            isl.last_migration = isl.generation
            natives = [m for m in isl.members if not self.entries[f"{i}:{m}"].migrant]
            count = max(1, int(len(natives) * s.migration_rate)) if natives else 0
            for pid in sorted(natives, key=lambda m: -self.entries[f"{i}:{m}"].fitness)[:count]:
                src = self.entries[f"{i}:{pid}"]
                for j in sorted({(i + 1) % k, (i - 1) % k} - {i}):
                    if self.entry(j, pid) is None:
                        self._place(Entry(pid, src.fitness, src.size, src.diversity, j, migrant=True))
                        moves.append((pid, i, j))
        return moves

    def features(self, island: int, pid: str | None) -> str:
        """The program's grid features (its entry on `island`, else on the island it lives on:
        a parent drawn from the archive or the whole population); only None is the original."""
        if pid is None:
            return "the original program"
        e = self.entry(island, pid) or next((x for x in self.entries.values() if x.id == pid), None)
        if e is None:
            return "not in the program database"
        return f"code size {e.size} chars, diversity {e.diversity:.2f} (cell {self.cell(e.size, e.diversity)})"

