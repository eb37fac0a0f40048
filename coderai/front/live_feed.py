"""The front's live feed: parts of the front publish what changed (a request started or
ended, a log line, a setting, the engines' state); the feed hands each event to every
subscriber's bounded queue (each open console, console/events.py). A subscriber that does
not read is never waited for: past the bound its oldest events are dropped and it is told
so once (`event: lagged`), so it can reload the snapshots it missed.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any

#: events one console may fall behind by before the oldest are dropped
BACKLOG = 1000

Snapshot = Callable[[], dict[str, Any]]


class Subscriber:
    def __init__(self) -> None:
        self.events: deque[bytes] = deque()
        self.lagged = False
        self.wake = asyncio.Event()

    def put(self, frame: bytes) -> None:
        if len(self.events) >= BACKLOG:
            self.events.popleft()
            self.lagged = True
        self.events.append(frame)
        self.wake.set()

    async def batches(
        self, first: list[bytes], ended: Callable[[], bool]
    ) -> AsyncGenerator[list[bytes], None]:
        """`first`, then what is put, a batch per wake-up, until `ended()`."""
        yield first
        while not ended():
            await self.wake.wait()
            self.wake.clear()
            batch = self.take()
            if batch:
                yield batch

    def take(self) -> list[bytes]:
        frames = list(self.events)
        self.events.clear()
        if self.lagged:
            self.lagged = False
            frames.insert(0, frame("lagged", {"dropped": True}))
        return frames


def frame(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class LiveFeed:
    """Publishers call `publish` on the event loop; it never blocks and never awaits."""

    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()
        #: what a new console is sent first, by event name
        self._snapshots: dict[str, Snapshot] = {}
        self.closed = False

    def close(self) -> None:
        """At shutdown: every console's stream ends, so none holds the server open."""
        self.closed = True
        for subscriber in self._subscribers:
            subscriber.wake.set()

    def snapshot(self, event: str, make: Snapshot) -> None:
        """Register the current state a console receives on connect, as `event`."""
        self._snapshots[event] = make

    @property
    def watched(self) -> bool:
        """Whether any console listens (publishers may skip building events otherwise)."""
        return bool(self._subscribers)

    def publish(self, event: str, data: Any) -> None:
        if not self._subscribers:
            return
        encoded = frame(event, data)
        for subscriber in self._subscribers:
            subscriber.put(encoded)

    async def subscribe(self) -> AsyncGenerator[list[bytes], None]:
        """Batches of encoded events for one console: the snapshots, then each change."""
        subscriber = Subscriber()
        self._subscribers.add(subscriber)
        try:
            # made after joining, so that no change falls between the snapshot and the feed
            snapshots = [frame(name, make()) for name, make in self._snapshots.items()]
            async for batch in subscriber.batches(snapshots, lambda: self.closed):
                yield batch
        finally:
            self._subscribers.discard(subscriber)


async def watch(feed: LiveFeed, event: str, make: Snapshot, interval: float) -> None:
    """Publish `make()` as `event` whenever it differs from the last one published: for
    state that changes without anyone announcing it (engine views between heartbeats).
    Runs until cancelled; builds nothing while no console listens."""
    feed.snapshot(event, make)
    last: dict[str, Any] | None = None
    while True:
        await asyncio.sleep(interval)
        if feed.watched:
            current = make()
            if current != last:
                feed.publish(event, current)
                last = current
        else:
            last = None
