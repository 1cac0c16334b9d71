"""Owns the `redteam` policy: an attacker that tries to fool the harness on the user's own
problem, and turns every success into a test (`stratagem redteam`, docs/integrity.md).

Each iteration asks the attacker (the `attack` role: a model, a coding-agent command or a
script, like every writer) for `attempts` designs at once. Each prompt states the problem and
the rules exactly as the writers get them, the catalog of shortcut classes with what catches
each here today, and every earlier attempt with what happened to it, in full; the attacker
chooses its class, each slot pointed at a direction of its own (`directions`: the untried
classes first, then those whose attempts came closest). An attempt declares its class and how
it should be caught in its first lines (`# exploit: <class>_<variant>`, `# caught-by: ...`).
Every attempt goes through the ordinary evaluation; one the harness accepts then gets the
red-team audit (`Session.audit`: the domain's `breach` graph, stronger than the harness),
whose results say what fired (a result's `details["fired"]`). The outcomes (`OUTCOMES`):
`broken` (it did not build or run), `caught` (by which check), `breach` (accepted, and the
audit shows it wrong or its gain false: flagged, never ranked, written as a fixture by
`corpus.py`), `neutralized` (accepted, its shortcut fired, and the audit found no false gain:
the harness's fresh inputs paid it nothing), `never_fired` (accepted, declared a shortcut, and
the audit saw no sign of it firing), `honest` (declared `none`, accepted, nothing fired) or
`unaudited` (accepted, and the audit could not run: said why); each with the ordinary
evaluation's speedup. The attempts and their outcomes are the policy's state (`attempts`), so a
killed run resumes with them and the report lists them (`views.py`).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from stratagem.agents.pike import Tickets
from stratagem.core.design import text_files
from stratagem.core.search import (
    DesignView,
    Feedback,
    IterationResult,
    Plan,
    Review,
    SearchState,
    Session,
)
from stratagem.core.verdict import Verdict, inconclusive
from stratagem.domains import get_domain
from stratagem.search.policies.pike_models import PikeBase
from stratagem.search.policies.pike_settings import RedteamSettings
from stratagem.search.policies.redteam import OUTCOMES, prompts
from stratagem.search.policies.redteam import corpus as breaches

CLOSEST = ("neutralized", "never_fired", "unaudited", "caught", "broken")
"""Once every class was tried: the outcomes whose classes the next attempts start from, closest first."""
STATE_KEY = breaches.ATTEMPTS_KEY.removeprefix("redteam/")
"""The policy's state key (the Session prefixes the policy's name)."""
BROKEN_KINDS = frozenset({"compile_error", "exception", "timeout", "crash", "oom", "cuda_error", "needs_gpu",
                          "harness_error"})
"""Failures that say the attempt did not build or run: nothing was learned about the checks."""
_CLAIM = re.compile(r"^\s*(?:#|//|--|!)\s*(exploit|caught-by)\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_CHECK = re.compile(r"^([a-z][a-z0-9_]*):")


@dataclass(frozen=True)
class Claim:
    """What an attempt says it tries, from its header lines."""

    exploit: str = "undeclared"
    caught_by: str = "undeclared"
    cls: str = ""
    """The catalog class the exploit names (`prompts.class_of`), set by the policy."""


def claim_of(text: str) -> Claim:
    """The `exploit:` and `caught-by:` comment lines among an attempt's first 40 lines."""
    found: dict[str, str] = {}
    for key, value in _CLAIM.findall("\n".join(text.splitlines()[:40])):
        found.setdefault(key.lower(), value)
    exploit = re.sub(r"[^a-z0-9_]+", "_", found.get("exploit", "undeclared").lower()).strip("_")[:60]
    return Claim(exploit or "undeclared", found.get("caught-by", "undeclared")[:200])


@dataclass(frozen=True)
class Outcome:
    """What happened to one attempt (stored in the policy's state, one per attempt)."""

    design_id: str
    exploit: str
    declared: str
    outcome: str
    """One of OUTCOMES."""
    check: str = ""
    """The check that caught it (`integrity/refilled_inputs`), or the audit's that found the breach."""
    evidence: str = ""
    speedup: float | None = None
    """The ordinary evaluation's speedup (None: not timed)."""
    fixture: str = ""
    """Where the breach was written (a folder)."""
    cls: str = ""
    """The catalog class its `exploit:` names (`prompts.class_of`)."""
    fired: str = ""
    """What the audit saw fire (empty: nothing)."""

    def record(self) -> dict[str, Any]:
        """The attempt as a breach fixture records it."""
        return {k: v for k, v in asdict(self).items() if k != "fixture"}

    def words(self) -> str:
        """What happened, in full, as the attacker, the run's lines and the report say it."""
        speed = "untimed" if self.speedup is None else f"{self.speedup:.3g}x"
        return {"broken": f"broken (did not build or run: {self.check}): {self.evidence}",
                "caught": f"caught by {self.check}: {self.evidence}",
                "breach": f"BREACH: accepted at {speed}, then shown wrong or its gain false by the audit "
                          f"({self.check}): {self.evidence}; already turned into a test, so do not repeat it",
                "neutralized": f"neutralized: accepted at {speed}; its shortcut fired ({self.fired}), and the audit "
                               "found no false gain: the harness's fresh inputs paid it nothing",
                "never_fired": f"never fired: accepted at {speed}; the audit saw no sign of its shortcut (no output "
                               "served again, no repeated input served faster, no state kept): it ran as honest code",
                "honest": f"honest: accepted at {speed}, and the audit saw no shortcut fire",
                "unaudited": f"unaudited: accepted at {speed}; the audit could not run ({self.evidence})"}[self.outcome]

    def told(self) -> prompts.Attempt:
        return prompts.Attempt(self.design_id, self.exploit, self.cls or self.exploit, self.declared, self.words())


def caught_check(fb: Feedback) -> str:
    """`validator/check` for a failure whose reason names its check, else the validator."""
    first = next((line for line in fb.report.splitlines() if line.startswith("[")), "")
    reason = first.split(": ", 1)[1] if ": " in first else ""
    m = _CHECK.match(reason)
    v = fb.validator or "harness"
    return f"{v}/{m.group(1)}" if m and m.group(1) != v else v


class RedteamPolicy(PikeBase[RedteamSettings]):
    """The attacker (see the module docstring)."""

    name = "redteam"

    def outcomes(self, session: Session) -> list[Outcome]:
        saved = session.load_state(STATE_KEY)
        keep = {f.name for f in fields(Outcome)}
        return [Outcome(**{k: v for k, v in o.items() if k in keep}) for o in saved] if isinstance(saved, list) else []

    def corpus(self) -> Path:
        return Path(self.s.corpus) if self.s.corpus else self.workdir.parent / "breaches"

    def directions(self, done: list[Outcome], n: int) -> list[prompts.Direction]:
        """A distinct direction for each of `n` slots written at once: the classes no attempt
        tried, in the catalog's order; once all were tried, those whose attempts came closest
        (CLOSEST), then a class the catalog lacks. The attacker chooses; this is where it starts."""
        catalog = prompts.classes(self.problem.domain)
        tried = {o.cls or o.exploit for o in done}
        left = [c for c in catalog if c[0] not in tried]
        best = {name: min((CLOSEST.index(o.outcome) for o in done if (o.cls or o.exploit) == name
                           and o.outcome in CLOSEST), default=len(CLOSEST)) for name, _ in catalog}
        closest = sorted((c for c in catalog if best[c[0]] < len(CLOSEST)), key=lambda c: best[c[0]])
        untried = tuple(c[0] for c in left)
        out = []
        for i in range(n):
            if i < len(left):
                out.append(prompts.Direction(i + 1, n, untried, left[i]))
            elif i - len(left) < len(closest):
                c = closest[i - len(left)]
                out.append(prompts.Direction(i + 1, n, untried, c, CLOSEST[best[c[0]]].replace("_", " ")))
            else:
                out.append(prompts.Direction(i + 1, n, untried, None))
        return out

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        if (exhausted := session.budget_left()) is not None:
            return IterationResult(plan=None, note=f"the {exhausted} budget is exhausted")
        done = self.outcomes(session)
        left = session.budget_remaining().queries
        n = self.s.attempts if left is None else max(0, min(self.s.attempts, left))
        brief = replace(self.brief(state), budget="")
        told = [o.told() for o in done]
        asks = [prompts.attack(brief, told, d) for d in self.directions(done, n)]
        agents = self.agents(session)
        with session.reserve(len(asks)) as r:
            tickets = Tickets.of(r)
            written = await asyncio.gather(*(agents.write("attack", p, tickets, worker=f"attacker-{i + 1}")
                                             for i, p in enumerate(asks)))
        ids: list[str] = []
        for i, w in enumerate(written):
            if w.source is None:
                continue
            claim = claim_of(w.source)
            cls = prompts.class_of(claim.exploit, [c for c, _ in prompts.classes(self.problem.domain)])
            fb = await session.evaluate(w.source, strategy="attack", author=f"attacker-{i + 1}",
                                        tags={"exploit": claim.exploit, "declared": claim.caught_by})
            ids.append(fb.design_id)
            if any(o.design_id == fb.design_id for o in done):
                continue  # a restatement of an earlier attempt: its outcome stands
            files = text_files(w.source, get_domain(self.problem.domain).main_file(self.problem))
            done.append(await self._settle(fb, replace(claim, cls=cls), files, session))
            session.save_state(STATE_KEY, [{**asdict(o), "words": o.words()} for o in done])
        answered = sum(w.source is not None for w in written)
        counts = {k.replace("_", " "): sum(o.outcome == k for o in done) for k in OUTCOMES}
        note = f"{answered} of {len(asks)} attempts written; so far " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        fatal = next((w.error for w in written if w.source is None and w.error_kind not in (None, "budget")), None)
        stop = answered == 0 and fatal is not None
        return IterationResult(plan=Plan(strategy="attack", rationale="red-team attempts"), design_ids=tuple(ids),
                               note=note + (f"; no attempt was written ({fatal}), stopping" if stop else ""),
                               exhausted=stop)

    async def _settle(self, fb: Feedback, claim: Claim, files: dict[str, str], session: Session) -> Outcome:
        base = Outcome(fb.design_id, claim.exploit, claim.caught_by, "caught", speedup=fb.speedup, cls=claim.cls)
        if fb.status in ("invalid", "error", "needs_gpu"):
            kind = "broken" if fb.kind in BROKEN_KINDS else "caught"
            first = next((line for line in fb.report.splitlines() if line.startswith("[")), fb.report)
            return replace(base, outcome=kind, check=caught_check(fb), evidence=first)
        verdict = await session.audit(fb.design_id)
        why = inconclusive(verdict)
        if why is not None or not isinstance(verdict, Verdict):
            return replace(base, outcome="unaudited", evidence=why or str(verdict))
        fired = "; ".join(str(f) for r in verdict.results for f in (r.details or {}).get("fired") or ())
        if verdict.status == "valid":
            outcome = "neutralized" if fired else "honest" if claim.cls == prompts.HONEST else "never_fired"
            return replace(base, outcome=outcome, fired=fired)
        first = verdict.failures[0]
        out = replace(base, outcome="breach", check=first.name, evidence=str(first.reason), fired=fired)
        where = breaches.write(self.corpus(), self.problem, files, out.record(), verdict)
        return replace(out, fixture=str(where))

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        """No Analyst: the audit (run on every accepted attempt) is this policy's review."""
        return None

    async def preflight(self) -> list[str]:
        return await super().preflight() if self.cfg.agents.model else []


