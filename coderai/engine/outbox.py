"""Hands results from the scheduler thread to the socket's owner (the event loop).

Deltas are merged per job until the loop takes them, so one CHUNKS message carries every
job's text produced since the last send. When the front is slow the loop sends less often
and each message carries more: batching grows with load instead of queues growing.

A held job's output (the front said its client lags) stays here until it is resumed, with
its DONE or FAIL behind it: the scheduler stops such a sequence where the backend can, and
where it cannot (one batch decodes every row) what it produces waits in the engine, bounded
by the job's token limit, instead of in the front.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from coderai.bus.codec import encode, encode_body
from coderai.bus.kinds import MsgType
from coderai.bus.messages import Done, Fail, Message
from coderai.engine import die_at

Sender = Callable[[list[bytes]], Awaitable[None]]
#: a job's output from one step: its text, or a map with calls and logprobs (scheduler._emit)
Delta = str | dict[str, Any]
#: shortest time between two batches sent by one engine
MIN_FLUSH_INTERVAL = 0.0005


class Outbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._deltas: dict[int, list[Delta]] = {}
        self._terminal: list[Message] = []
        #: messages that go ahead of the deltas (a prompt's progress)
        self._notes: list[Message] = []
        self._woken = False
        self._ready = asyncio.Event()
        #: set while everything published has been sent: kept only under the test seam,
        #: which waits on it before it kills the engine (engine/die_at.py)
        self.sent = threading.Event()
        self.sent.set()
        self._last_flush = 0.0
        #: loop thread only
        self._held: set[int] = set()
        self._held_terminal: list[Message] = []

    def publish(
        self,
        deltas: list[tuple[int, Delta]],
        terminal: list[Message],
        notes: Iterable[Message] = (),
    ) -> None:
        """Scheduler thread: add one step's output (notes go out ahead of it) and wake the
        loop once."""
        with self._lock:
            self._notes.extend(notes)
            for job_id, text in deltas:
                parts = self._deltas.get(job_id)
                if parts is None:
                    self._deltas[job_id] = [text]
                else:
                    parts.append(text)
            self._terminal.extend(terminal)
            if die_at.RULES:
                self.sent.clear()
            if self._woken:
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._ready.set)

    def clear(self) -> None:
        """Drop everything not yet sent: the front it was for is gone (a remote engine
        starting over as a new incarnation)."""
        with self._lock:
            self._deltas, self._terminal, self._notes = {}, [], []
            self._held, self._held_terminal = set(), []

    def hold(self, job_id: int) -> None:
        """Event loop: keep this job's output back until resume()."""
        self._held.add(job_id)

    def resume(self, job_id: int) -> None:
        if job_id in self._held:
            self._held.discard(job_id)
            self._ready.set()

    def _split_held(self, deltas: dict[int, list[Delta]], terminal: list[Message]) -> list[Message]:
        """Put back what belongs to held jobs; returns the terminal messages to send now."""
        terminal = [*self._held_terminal, *terminal]
        self._held_terminal = []
        if not self._held:
            return terminal
        with self._lock:
            for job_id in self._held & deltas.keys():
                # in front of anything the scheduler added meanwhile
                self._deltas[job_id] = deltas.pop(job_id) + self._deltas.get(job_id, [])
        now: list[Message] = []
        for msg in terminal:
            held = isinstance(msg, Done | Fail) and msg.job_id in self._held
            (self._held_terminal if held else now).append(msg)
        return now

    async def run(self, send: Sender) -> None:
        """Event loop: send what has accumulated: notes (PROMPT), then CHUNKS, then the
        DONE/FAIL they precede.

        At most one batch per MIN_FLUSH_INTERVAL: an engine stepping faster than that (a
        fast model, many streams) would otherwise send the front many small messages, and
        the front's cost grows with messages, not tokens. A first token after a quiet spell
        is not delayed; a real model's steps are far longer than the interval anyway.
        """
        loop = asyncio.get_running_loop()
        while True:
            await self._ready.wait()
            wait = self._last_flush + MIN_FLUSH_INTERVAL - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_flush = loop.time()
            self._ready.clear()
            with self._lock:
                deltas, self._deltas = self._deltas, {}
                terminal, self._terminal = self._terminal, []
                notes, self._notes = self._notes, []
                self._woken = False
            terminal = self._split_held(deltas, terminal)
            for msg in notes:
                await send(encode(msg))
            if deltas:
                flat: list[object] = []
                for job_id, parts in deltas.items():
                    flat.append(job_id)
                    flat.append(_merged(parts))
                await send(encode_body(MsgType.CHUNKS, {"deltas": flat}))
            for msg in terminal:
                await send(encode(msg))
            if die_at.RULES:
                with self._lock:
                    if not self._woken:
                        self.sent.set()


def _merged(parts: list[Delta]) -> Delta | list[Delta]:
    """One job's deltas in one CHUNKS entry: text joined; with maps among them, the list
    in order (the front reads a str, a map or a list of both)."""
    if len(parts) == 1:
        return parts[0]
    try:  # the hot path: texts only; a map among them makes join refuse
        return "".join(parts)  # type: ignore[arg-type]
    except TypeError:
        return parts
