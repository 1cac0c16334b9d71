"""Owns the `recipes` policy: the no-LLM search that tries known transformations of the
reference (see `catalog`) and then combines the ones that helped. The PyTorch domain offers it
to the policy registry (`PyTorchDomain.policies`, `POLICY` below) as its model-free default.

The policy is a pure function of `SearchState`, so a killed run resumes where it stopped: what
was tried is read back from each design's `recipes` tag (the recipe names, in catalog order),
or, for runs stored before tags existed, from its author (`recipe:<name>` for a single
recipe, `recipe:<a>+<b>` for a combination), which is still written for the views.

- While some applicable single recipe is untried: evaluate each untried one (sequentially,
  stopping as soon as a budget runs out).
- Then: combine the helpful singles (valid, faster than the plain reference and faster than
  `inference_mode` alone), at most one per compatibility group, greedily by speedup, plus
  `inference_mode` itself when it helped. A combination of two or more recipes not yet tried
  is evaluated, with the singles as parents. Then the policy is exhausted; when fewer than two
  recipes are left to combine, the iteration's note says why (none helped, one did, or the ones
  that did are alternatives of one group, or did not beat `inference_mode` alone).

`SearchConfig.seed` is not used: recipes run in catalog order (cheap ones first, the slowest
compile last), which is what matters when a budget cuts the batch short.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from stratagem.config import StratagemConfig
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView, IterationResult, Plan, Review, SearchState, Session
from stratagem.domains.base import DomainPolicy
from stratagem.domains.pytorch.recipes.catalog import (
    BY_NAME,
    CATALOG,
    Recipe,
    catalog_order,
    combination_name,
    recipe_names,
    render,
)
from stratagem.errors import ConfigError

AUTHOR_PREFIX = "recipe:"
STATUS_WORKER = "recipes"
BASE_RECIPE = "inference_mode"
"""The cheapest recipe: the others must beat it to count as helpful."""


TAG = "recipes"
"""The tag holding the recipe names of a design this policy made."""


def author_of(recipes: Sequence[Recipe]) -> str:
    """The author recorded for a design made from `recipes`: `recipe:a+b`."""
    return AUTHOR_PREFIX + combination_name(recipes)


def check_recipe_names(names: Sequence[str] | None) -> None:
    """Raises ConfigError when a name is not in the catalog (the message lists the known ones)."""
    unknown = [n for n in (names or ()) if n not in BY_NAME]
    if unknown:
        raise ConfigError(f"unknown recipes {unknown}; known: {list(recipe_names())}")


class RecipesPolicy:
    """Tries every applicable recipe alone, then the best compatible combination of them."""

    max_iterations = 2
    """At most two iterations: the singles, then their combination (the live view's total)."""

    name = "recipes"

    def __init__(self, recipes: list[str] | None = None, on_gpu: bool | None = None) -> None:
        """`recipes`: restrict to these names (None: every one). `on_gpu`: whether candidates
        run on a GPU (None: decided from `SearchState.device`).

        Raises:
            ConfigError: an unknown recipe name.
        """
        check_recipe_names(recipes)
        self.allowed = None if recipes is None else frozenset(recipes)
        self.on_gpu = on_gpu

    @classmethod
    def from_config(cls, cfg: StratagemConfig, on_gpu: bool | None = None) -> RecipesPolicy:
        """The policy `cfg.search.recipes` describes.

        Raises:
            ConfigError: an unknown recipe name.
        """
        return cls(cfg.search.recipes, on_gpu)

    # -- decisions (pure functions of the state) ------------------------------------------

    def _gpu(self, state: SearchState) -> bool:
        return self.on_gpu if self.on_gpu is not None else state.device.startswith("cuda")

    def applicable(self, state: SearchState) -> list[Recipe]:
        """The single recipes this problem admits, in catalog order."""
        return [
            r for r in CATALOG
            if (self.allowed is None or r.name in self.allowed)
            and r.applies(state.problem, _admitting(state), self._gpu(state))
        ]

    def untried(self, state: SearchState) -> list[Recipe]:
        """Applicable single recipes with no design yet."""
        done = _authors(state.designs)
        return [r for r in self.applicable(state) if author_of([r]) not in done]

    def combination(self, state: SearchState) -> list[Recipe]:
        """The helpful singles, at most one per compatibility group, best first; plus
        `inference_mode` when it helped. In catalog order."""
        singles = _singles(state.designs)
        base = singles.get(BASE_RECIPE)
        floor = 1.0
        if base is not None and base.speedup is not None and _helped(base, 1.0):
            floor = base.speedup  # the others must beat inference_mode alone
        helpful = [
            (r, d) for r in self.applicable(state) if r.name != BASE_RECIPE
            for d in [singles.get(r.name)] if _helped(d, floor)
        ]
        helpful.sort(key=lambda rd: -((rd[1].speedup if rd[1] is not None else None) or 0.0))
        chosen: list[Recipe] = []
        groups: set[str] = set()
        for r, _ in helpful:
            if r.group not in groups:
                chosen.append(r)
                groups.add(r.group)
        if _helped(base, 1.0) and BASE_RECIPE in {r.name for r in self.applicable(state)}:
            chosen.append(BY_NAME[BASE_RECIPE])
        return catalog_order(chosen)

    def nothing_to_combine(self, state: SearchState) -> str:
        """Why the combination has fewer than two recipes, as it happened: none helped, one
        did, or several did but they are alternatives (one compatibility group: one of them at
        a time) or did not beat `inference_mode` alone."""
        singles = _singles(state.designs)
        alone = [(r, d) for r in self.applicable(state) for d in [singles.get(r.name)] if d and _helped(d, 1.0)]
        if not alone:
            shaky = [f"{r.name} {d.speedup_text()}" for r in self.applicable(state)
                     for d in [singles.get(r.name)] if d is not None and d.status == "unstable"]
            unsettled = (f" ({_and(shaky)}: timing unstable, so not counted)" if shaky else "")
            return (f"every recipe tried; none was faster than eager by more than its interval{unsettled}, so "
                    "there is nothing to combine")
        named = ", ".join(f"{r.name} {d.speedup_text()}" for r, d in alone)
        if len(alone) == 1:
            return f"every recipe tried; only {named} helped, so there is nothing to combine"
        base = singles.get(BASE_RECIPE)
        floor = base.speedup if base is not None and base.speedup is not None and _helped(base, 1.0) else 1.0
        why = []
        behind = [r.name for r, d in alone if r.name != BASE_RECIPE and not _helped(d, floor)]
        if behind:
            its = "their intervals" if len(behind) > 1 else "its interval"
            why.append(f"{_and(behind)} did not beat {BASE_RECIPE} alone by more than {its}")
        groups: dict[str, list[str]] = {}
        for r, d in alone:
            if r.name != BASE_RECIPE and _helped(d, floor):
                groups.setdefault(r.group, []).append(r.name)
        for group, names in groups.items():
            if len(names) > 1:
                why.append(f"{_and(names)} are alternatives (all of the {group} group: a design takes one "
                           "of them), so only the fastest can enter a combination")
        left = _and([r.name for r in self.combination(state)]) or "none"
        count = NUMBERS.get(len(alone), str(len(alone)))
        return (f"every recipe tried; {count} helped alone ({named}), but {'; '.join(why)}: that leaves "
                f"one ({left}), so there is nothing to combine")

    # -- the Policy protocol --------------------------------------------------------------

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        """Evaluate the untried singles; once none is left, the combination; then exhausted."""
        todo = self.untried(state)
        if todo:
            return await self._singles(state, todo, session)
        return await self._combine(state, session)

    async def review(
        self, design: DesignView, state: SearchState, session: Session
    ) -> Review | None:
        """No reviewer: the recipes are honest transformations the harness checks anyway."""
        return None

    # -- evaluations ----------------------------------------------------------------------

    async def _singles(
        self, state: SearchState, todo: list[Recipe], session: Session
    ) -> IterationResult:
        plan = Plan(
            strategy="recipes",
            rationale="each applicable recipe alone, to learn which ones help this problem",
            instructions=", ".join(r.name for r in todo),
        )
        ids: list[str] = []
        stopped = ""
        for r in todo:
            exhausted = session.budget_left()
            if exhausted is not None:
                stopped = f"stopped before {r.name}: the {exhausted} budget is spent"
                break
            ids.append(await _evaluate(session, state, [r], ()))
        return IterationResult(plan=plan, design_ids=tuple(ids), note=stopped)

    async def _combine(self, state: SearchState, session: Session) -> IterationResult:
        chosen = self.combination(state)
        if len(chosen) < 2:
            return IterationResult(plan=None, exhausted=True, note=self.nothing_to_combine(state))
        author = author_of(chosen)
        if author in _authors(state.designs):
            return IterationResult(plan=None, exhausted=True,
                                   note=f"every recipe and the combination {author} tried")
        exhausted = session.budget_left()
        if exhausted is not None:
            return IterationResult(plan=None, note=f"the {exhausted} budget is spent")
        singles = _singles(state.designs)
        parents = tuple(singles[r.name].id for r in chosen)
        plan = Plan(
            strategy="recipes",
            evidence=parents,
            rationale="the recipes that helped alone, at most one per compatibility group, "
            "chosen greedily by speedup",
            instructions=", ".join(r.name for r in chosen),
        )
        design_id = await _evaluate(session, state, chosen, parents)
        return IterationResult(plan=plan, design_ids=(design_id,), exhausted=True)



async def _evaluate(
    session: Session, state: SearchState, recipes: list[Recipe], parents: tuple[str, ...]
) -> str:
    """Render, evaluate through the session, return the design id."""
    session.set_status(STATUS_WORKER, f"evaluating {combination_name(recipes)}")
    source = render(state.problem.source, recipes)
    fb = await session.evaluate(source, strategy="recipe", parents=parents,
                                author=author_of(recipes), tags={TAG: [r.name for r in recipes]})
    return fb.design_id


def recipes_of(d: DesignView) -> tuple[str, ...]:
    """The recipe names a design was made from: its `recipes` tag, else its author."""
    tagged = d.tags.get(TAG)
    if isinstance(tagged, list) and all(isinstance(x, str) for x in tagged):
        return tuple(tagged)
    a = d.author or ""
    return tuple(a[len(AUTHOR_PREFIX):].split("+")) if a.startswith(AUTHOR_PREFIX) else ()


def _authors(designs: Sequence[DesignView]) -> set[str]:
    """The `recipe:a+b` names of the combinations tried (from tags or authors)."""
    return {AUTHOR_PREFIX + "+".join(names) for d in designs if (names := recipes_of(d))}


def _singles(designs: Sequence[DesignView]) -> dict[str, DesignView]:
    """Recipe name -> its single-recipe design (the latest, should there be several)."""
    out: dict[str, DesignView] = {}
    for d in designs:
        names = recipes_of(d)
        if len(names) == 1 and names[0] in BY_NAME:
            out[names[0]] = d
    return out


NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def _and(names: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def _helped(d: DesignView | None, floor: float) -> bool:
    """Faster than `floor` by more than the paired measurement's interval (its lower bound is
    above the floor), so noise never enters a combination."""
    if d is None or d.status != "valid" or d.speedup is None:
        return False
    low = d.speedup_low if d.speedup_low is not None else d.speedup
    return low > floor


CALIBRATED_ADMITS = {"float32": {"atol": 1.0, "rtol": 1.0}}
"""What the recipes' tolerance conditions see under the calibrated rule: every precision may be
tried, since the harness admits it exactly when its measured error is within the factor of
eager's own."""


DOWNGRADES_REJECTED = {"float32": {"atol": 0.0, "rtol": 0.0}}
"""What they see under the reference rule (the default): a design below the reference's
precision is a downgrade whatever its error (docs/correctness.md), so autocast is never tried."""


def _admitting(state: SearchState) -> dict[str, dict[str, float]]:
    if state.correctness_mode == "calibrated":
        return CALIBRATED_ADMITS
    return DOWNGRADES_REJECTED if state.correctness_mode == "reference" else state.tolerances


class RecipesSettings(BaseModel):
    """`[policies.recipes]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    recipes: list[str] | None = None
    """Only these recipe names (None: every one that applies; `search.recipes` is the older
    spelling of the same setting)."""


def build(cfg: StratagemConfig, problem: Problem, on_gpu: bool, settings: BaseModel | None) -> RecipesPolicy:
    """The policy the settings (else `search.recipes`) describe.

    Raises:
        ConfigError: an unknown recipe name.
    """
    s = settings if isinstance(settings, RecipesSettings) else RecipesSettings()
    return RecipesPolicy(s.recipes if s.recipes is not None else cfg.search.recipes, on_gpu)


POLICY = DomainPolicy("recipes", "known transformations of the reference, then their best combination (no LLM)",
                      build, RecipesSettings, model_free_default=True)
"""What the PyTorch domain offers the policy registry: `recipes`, its default without a model."""
