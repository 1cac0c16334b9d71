"""Owns workers started ahead: at most one spare worker per slot, started while the slot's
current request runs, so the next request of the same kind finds a process that has already
started, imported its domain's worker module and warmed it (on a GPU, its device context)
(`sandbox.start_ahead`). Every design still runs in a fresh sandboxed process: a spare serves
one request, then ends, and the slot's next spare is already starting.

Bounds: one spare per slot; none on a device while a request runs alone there (it ran out of
memory beside other work: the device's spares are killed before it runs, so their contexts are
not in its way); a spare whose request never comes is killed when the spares are closed, when
the event loop that started it ends (its keeper task is cancelled), and, should its parent
die, by the signal the sandbox asks for at its start (`isolation._die_with_parent`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from stratagem.evaluation.sandbox import Ahead, SandboxSettings, ahead_key, start_ahead

SPARE_MODES = ("gpu", "always", "never")
"""`[evaluation] spare_workers`: where slots get spares."""


def wanted(mode: str, physical: str) -> bool:
    """Whether a slot on `physical` (`cpu`, `cuda:N`) gets spares under `mode`."""
    return mode == "always" or (mode == "gpu" and physical.startswith("cuda"))


class Spares:
    """The spare workers of one executor's slots, in one event loop."""

    def __init__(self) -> None:
        self._ready: dict[int, Ahead] = {}
        self._keepers: dict[int, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.served = 0
        """Requests given to a spare (the rest started a process of their own)."""

    def _here(self) -> None:
        """Forget (and kill) spares of an event loop that is not this one."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.kill_all()
            self._loop = loop

    def take(self, slot: int, request_json: str, settings: SandboxSettings) -> Ahead | None:
        """The slot's spare, when it is ready and made for a request like this one (the sandbox
        checks the key again and kills it otherwise); None: the request starts its own."""
        self._here()
        ahead = self._ready.get(slot)
        if ahead is None or ahead.key != ahead_key(request_json, settings) or ahead.proc.returncode is not None:
            return None
        del self._ready[slot]
        keeper = self._keepers.pop(slot, None)
        if keeper is not None:
            keeper.cancel()  # its keeper lets it go (taken): the request's run owns it now
        self.served += 1
        return ahead

    def start(self, slot: int, request_json: str, settings: SandboxSettings, device: str, lock_path: str | None,
              avoid_cores: tuple[int, ...] = ()) -> None:
        """Start the slot's spare for requests like `request_json`, unless it has one (ready or
        starting)."""
        self._here()
        if slot in self._keepers:
            return
        self._keepers[slot] = asyncio.get_running_loop().create_task(
            self._keep(slot, request_json, settings, device, lock_path, avoid_cores))

    async def _keep(self, slot: int, request_json: str, settings: SandboxSettings, device: str,
                    lock_path: str | None, avoid_cores: tuple[int, ...]) -> None:
        """Start the spare and watch it until it is taken (the task is cancelled with the spare
        out of `_ready`), dies (forgotten), or is not needed (cancelled with it still ready:
        killed)."""
        ahead: Ahead | None = None
        try:
            ahead = await start_ahead(request_json, settings, device, lock_path, avoid_cores)
            self._ready[slot] = ahead
            await ahead.proc.wait()  # ended before any request came (an import that failed)
            ahead.kill()
            if self._ready.get(slot) is ahead:
                del self._ready[slot]
        except asyncio.CancelledError:
            if ahead is not None and self._ready.get(slot) is ahead:  # not taken: not needed
                del self._ready[slot]
                ahead.kill()
                with contextlib.suppress(BaseException):
                    await asyncio.shield(ahead.proc.wait())
            raise
        except OSError:
            pass  # no spare: requests start their own process, as without spares
        finally:
            if self._keepers.get(slot) is asyncio.current_task():
                del self._keepers[slot]

    def kill(self, which: Callable[[int], bool]) -> list[Ahead]:
        """Kill the spares of the slots `which` selects (ready or starting); the ready ones killed."""
        killed = []
        for slot in [s for s in {*self._ready, *self._keepers} if which(s)]:
            ahead = self._ready.pop(slot, None)
            if ahead is not None:
                ahead.kill()
                killed.append(ahead)
            keeper = self._keepers.pop(slot, None)
            if keeper is not None and not keeper.done():
                with contextlib.suppress(RuntimeError):  # of a loop already closed
                    keeper.cancel()
        return killed

    def kill_all(self) -> list[Ahead]:
        return self.kill(lambda _s: True)

    async def close(self) -> None:
        """Kill every spare and wait for their ends (nothing of them is left running)."""
        keepers = [k for k in self._keepers.values() if k.get_loop() is asyncio.get_running_loop()]
        killed = self.kill_all()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await asyncio.gather(*keepers, *(a.proc.wait() for a in killed), return_exceptions=True)

    def pids(self) -> list[int]:
        """The spares' process ids (ready ones)."""
        return [a.proc.pid for a in self._ready.values()]
