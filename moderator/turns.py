"""Fetch order for a step of concurrently decided batches: each batch takes a `Turn` as it
starts (asyncio starts tasks in the order they were made, so in fetch order) and runs the step
only once the batch fetched before it has finished its own (moderator/review/hold.py: the context
rings; moderator/users/escalation.py: strikes and floods).
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple


class Turn(NamedTuple):
    """A batch's place in one step: it waits for `after` (the batch fetched before it, None for
    the first) and ends with `done`, which `finish` sets however the batch ends."""

    after: asyncio.Future[None] | None
    done: asyncio.Future[None]

    async def wait(self) -> None:
        """Return once `after` is done: at once, without a loop step, when it is already."""
        if self.after is not None and not self.after.done():
            await asyncio.wait({self.after})  # never cancels it: a later batch's cancel is its own

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Turns:
    """One step's turns, handed out in the order they are taken."""

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None  # the latest turn's end

    def take(self) -> Turn:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        turn, self._last = Turn(self._last, done), done
        return turn
