"""Prompt state on disk, below host RAM: each state the RAM cache keeps is also written
here, by a thread of its own (never on the step path), so that a conversation's prefix
outlives the engine: after a server or engine restart, or a model swap, its next turn
restores the state from disk (into RAM, then as a RAM hit: host_tier.py) instead of
reading its prompt again.

Files live in the state folder, `prompt-cache/<compat>/`, one per saved state, named by
a digest of what it holds. A file's header names what it belongs to (`compat`: the model
file's path, size and modification time, the llama.cpp build, the KV cache's types and
layout), the tokens it holds, and a digest of its bytes. A file whose header names
something else (a foreign file), that cannot be read, or whose bytes do not match their
digest (a corrupt one) is named in the log and deleted. The folder is bounded in bytes;
the least recently used files go first (a file's modification time is touched when it is
restored). A folder none of whose files has been written or restored for STALE_DAYS (a
model file since changed, an older llama.cpp build: states nothing will read again) is
deleted whole when a cache opens beside it; an engine that idled that long with the
folder open finds its files gone as it reads one (it reads the prompt instead), and
makes the folder again for its next write.

Format: MAGIC, the header's length (4 bytes, little-endian), the header (JSON), the
state's bytes, then each checkpoint's bytes in order.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import queue
import shutil
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderai.engine.backends.llamacpp.checkpoints import Checkpoint, Held
from coderai.engine.backends.llamacpp.prefix_cache import common_prefix
from coderai.engine.backends.llamacpp.ram_cache import Saved
from coderai.engine.holdings import lead_of

log = logging.getLogger("coderai.engine")

MAGIC = b"CAIPC1\n\0"
SUFFIX = ".state"
#: a header larger than this is no header of ours
MOST_HEADER = 64 << 20
#: states waiting for the writer at most
QUEUED = 32
#: the fewest tokens a state read from disk must give (fewer cost less to read again)
LEAST = 64


#: the folder's bound where the entry sets none
DEFAULT_MB = 4096
#: a compat folder unused for this long is deleted (see the module's docstring)
STALE_DAYS = 7


class Unreadable(Exception):
    """A file that is not a state of this cache: why, for the log."""


@dataclass(frozen=True, eq=False)
class Entry:
    """A state on disk, as the index knows it (its bytes stay in the file); one entry
    per file, compared by identity."""

    name: str
    tokens: list[int]
    start: int
    size: int

    @functools.cached_property
    def lead(self) -> int | None:
        """Its prompt's lead (engine/holdings.py), a tail's too (as in RAM: Saved.lead)."""
        return lead_of(self.tokens)


def stale_folders(root: Path, before: float) -> list[Path]:
    """The folders under `root` whose newest file (or the folder itself, when empty) was
    last changed before `before` (unix seconds)."""
    out = []
    for folder in root.iterdir():
        with contextlib.suppress(OSError):  # another engine may be sweeping it now
            if not folder.is_dir():
                continue
            times = [folder.stat().st_mtime] + [f.stat().st_mtime for f in folder.iterdir()]
            if max(times) < before:
                out.append(folder)
    return out


def compat_key(compat: dict[str, Any]) -> str:
    """The folder a compat's files live in (pure)."""
    text = json.dumps(compat, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def file_name(tokens: list[int], start: int) -> str:
    """A state's file, named by what it holds (pure): the same state is one file."""
    digest = hashlib.blake2b(struct.pack(f"<q{len(tokens)}i", start, *tokens), digest_size=16)
    return digest.hexdigest() + SUFFIX


def encode(saved: Saved, compat: dict[str, Any]) -> bytes:
    """A saved state as its file's bytes (pure)."""
    blobs = [bytes(saved.data), *(bytes(c.data) for c in saved.checkpoints)]
    digest = hashlib.blake2b(digest_size=16)
    for blob in blobs:
        digest.update(blob)
    header = json.dumps({
        "compat": compat,
        "tokens": saved.tokens,
        "start": saved.start,
        "held": [saved.held.first, saved.held.end],
        "sizes": [len(b) for b in blobs],
        "checkpoints": [c.tokens for c in saved.checkpoints],
        "digest": digest.hexdigest(),
    }).encode()  # fmt: skip
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *blobs])


def read_header(raw: bytes, compat: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A file's header, checked against this cache's compat, and where its bytes begin
    (pure); raises Unreadable."""
    if raw[: len(MAGIC)] != MAGIC:
        raise Unreadable("not a prompt-cache file")
    begin = len(MAGIC) + 4
    (length,) = struct.unpack_from("<I", raw, len(MAGIC)) if len(raw) >= begin else (-1,)
    if not 0 < length <= MOST_HEADER or len(raw) < begin + length:
        raise Unreadable("its header is cut short")
    try:
        header = json.loads(raw[begin : begin + length])
        tokens, start, sizes = header["tokens"], header["start"], header["sizes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Unreadable(f"its header cannot be read ({exc})") from None
    if header.get("compat") != compat:
        raise Unreadable("it belongs to another model file, llama.cpp build or cache layout")
    if not (isinstance(tokens, list) and all(type(t) is int for t in tokens)
            and type(start) is int and 0 <= start < len(tokens)
            and isinstance(sizes, list) and all(type(s) is int and s >= 0 for s in sizes)
            and len(sizes) == 1 + len(header.get("checkpoints", []))):  # fmt: skip
        raise Unreadable("its header holds values out of shape")
    return header, begin + length


def decode(raw: bytes, compat: dict[str, Any]) -> Saved:
    """A file's bytes as a saved state, its digest checked (pure); raises Unreadable."""
    header, at = read_header(raw, compat)
    sizes = header["sizes"]
    if len(raw) != at + sum(sizes):
        raise Unreadable(f"it holds {len(raw) - at} bytes of state, not {sum(sizes)}")
    blobs, digest = [], hashlib.blake2b(digest_size=16)
    for size in sizes:
        blob = bytearray(raw[at : at + size])
        digest.update(blob)
        blobs.append(blob)
        at += size
    if digest.hexdigest() != header["digest"]:
        raise Unreadable("its bytes do not match their digest")
    first, end = header["held"]
    marks = header["checkpoints"]
    points = [Checkpoint(n, blob) for n, blob in zip(marks, blobs[1:], strict=True)]
    return Saved(list(header["tokens"]), blobs[0], Held(first, end), points, header["start"])


class DiskCache:
    """One model instance's states on disk: the index, the writer thread, the bound."""

    def __init__(self, root: Path, compat: dict[str, Any], max_bytes: int) -> None:
        self.compat = compat
        self.folder = root / compat_key(compat)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        #: name -> entry, least recently used first (modification time)
        self._index: dict[str, Entry] = {}
        self.bytes = 0
        self.writes = 0
        self.loads = 0
        #: states waiting to be written: bounded, so that a slow disk cannot hold states
        #: RAM has let go in memory without end (one past it is not written)
        self._queue: queue.Queue[Saved | None] = queue.Queue(maxsize=QUEUED)
        self._writer: threading.Thread | None = None
        self._closed = False
        #: the leads of its states (engine/holdings.py): replaced whole as the index
        #: changes, read without the lock (the scheduler thread must not wait on the
        #: writer's)
        self.leads: frozenset[int] = frozenset()

    def open(self) -> None:
        """Delete stale folders beside this one, read every file's header (deleting what
        is not ours), then start the writer."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in stale_folders(self.folder.parent, time.time() - STALE_DAYS * 86400):
            if stale != self.folder:
                log.info("prompt cache: %s has not been used for %d days and is deleted",
                         stale.name, STALE_DAYS)  # fmt: skip
                shutil.rmtree(stale, ignore_errors=True)
        found: list[tuple[float, Entry]] = []
        for path in self.folder.iterdir():
            if path.suffix != SUFFIX:
                with contextlib.suppress(OSError):
                    if path.name.endswith(".tmp") and time.time() - path.stat().st_mtime > 3600:
                        path.unlink()  # a write cut short (a recent one may be another's)
                continue
            try:
                with path.open("rb") as f:
                    head = f.read(len(MAGIC) + 4)
                    whole = len(head) == len(MAGIC) + 4
                    length = struct.unpack_from("<I", head, len(MAGIC))[0] if whole else 0
                    raw = head + f.read(min(length, MOST_HEADER))
                header, _ = read_header(raw, self.compat)
                stat = path.stat()
            except (OSError, Unreadable) as exc:
                self._discard(path, str(exc))
                continue
            entry = Entry(path.name, header["tokens"], header["start"], stat.st_size)
            found.append((stat.st_mtime, entry))
        for _, entry in sorted(found, key=lambda item: item[0]):
            self._index[entry.name] = entry
            self.bytes += entry.size
        with self._lock:
            self._new_leads()
        self._writer = threading.Thread(target=self._writing, name="disk-cache", daemon=True)
        self._writer.start()

    def _discard(self, path: Path, why: str) -> None:
        log.warning("prompt cache: %s is not used and is deleted: %s", path.name, why)
        path.unlink(missing_ok=True)

    # -- writing ------------------------------------------------------------------------
    def save(self, saved: Saved) -> None:
        """Write a state the RAM cache took (later, on the writer thread)."""
        writer = self._writer
        if self._closed or writer is None or not writer.is_alive() or saved.size > self.max_bytes:
            return
        with contextlib.suppress(queue.Full):  # the disk lags: this state stays in RAM only
            self._queue.put_nowait(saved)

    def lagging(self) -> bool:
        """Whether the writer's queue is full (a state saved now would not be written)."""
        return self._queue.full()

    def flush(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until every state asked to be written is; whether
        they all were."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            writer = self._writer
            if time.monotonic() >= deadline or writer is None or not writer.is_alive():
                return not self._queue.unfinished_tasks
            time.sleep(0.01)
        return True

    def close(self) -> None:
        """No more writes: the writer ends once it has written what is queued (the thread
        keeps this cache alive until then; nothing waits for it)."""
        if self._writer is not None and not self._closed:
            self._closed = True
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)

    def _writing(self) -> None:
        while True:
            saved = self._queue.get()
            try:
                if saved is None:
                    return
                self._write(saved)
            except Exception as exc:  # a full disk, say: the state stays in RAM only
                log.warning("prompt cache: a state could not be written: %s", exc)
            finally:
                self._queue.task_done()

    def _write(self, saved: Saved) -> None:
        name = file_name(saved.tokens, saved.start)
        blob = encode(saved, self.compat)
        path = self.folder / name
        # its own temporary name: another engine may write into this folder too
        tmp = path.with_name(f"{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        # made again where another engine swept it away as stale while this one idled
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # prompts: private
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
        entry = Entry(name, saved.tokens, saved.start, len(blob))
        with self._lock:
            old = self._index.pop(name, None)
            self.bytes += entry.size - (old.size if old else 0)
            self._index[name] = entry
            # states it holds all of go, as in RAM (ram_cache.put)
            held = [e for e in self._index.values() if e is not entry and e.start >= saved.start
                    and common_prefix(e.tokens, saved.tokens) == len(e.tokens)]  # fmt: skip
            for other in held:
                self._forget(other)
            while self.bytes > self.max_bytes and self._index:
                self._forget(next(iter(self._index.values())))
            self._new_leads()
            self.writes += 1

    def _forget(self, entry: Entry) -> None:
        """Under the lock: an entry and its file go."""
        del self._index[entry.name]
        self.bytes -= entry.size
        (self.folder / entry.name).unlink(missing_ok=True)

    # -- reading ------------------------------------------------------------------------
    def candidates(self, tokens: list[int], have: int, most: int) -> list[Entry]:
        """The states to read for a sequence holding `have` of `tokens`: the one that
        begins within what it has and gives the most of them, then, in turn, the one that
        begins within that and gives more (a conversation's later turns, saved apart);
        each at least `least` tokens more, none over `most` bytes. Heads first."""
        with self._lock:
            entries = [e for e in self._index.values() if e.size <= most]
        chain: list[Entry] = []
        reach = have
        while True:
            best: tuple[int, Entry] | None = None
            for entry in entries:
                if entry.start > reach or len(entry.tokens) < reach + LEAST or entry in chain:
                    continue
                shared = min(common_prefix(entry.tokens, tokens), len(tokens) - 1)
                if shared >= reach + LEAST and (best is None or shared > best[0]):
                    best = (shared, entry)
            if best is None:
                return chain
            chain.append(best[1])
            reach = best[0]

    def load(self, entry: Entry) -> Saved | None:
        """A state read back (its digest checked), or None: a file that cannot be used is
        named in the log and deleted. Restoring counts as a use (its time is touched)."""
        path = self.folder / entry.name
        try:
            saved = decode(path.read_bytes(), self.compat)
            os.utime(path)
        except (OSError, Unreadable) as exc:
            with self._lock:
                if self._index.pop(entry.name, None) is not None:
                    self.bytes -= entry.size
                    self._new_leads()
            if isinstance(exc, FileNotFoundError):
                return None  # another instance sharing the folder let it go: not an error
            self._discard(path, str(exc))
            return None
        with self._lock:
            if entry.name in self._index:  # to the end: the most recently used
                self._index[entry.name] = self._index.pop(entry.name)
        self.loads += 1
        return saved

    def _new_leads(self) -> None:
        """Under the lock, after the index changed: the leads it holds, made anew."""
        self.leads = frozenset(e.lead for e in self._index.values() if e.lead is not None)

    def __len__(self) -> int:
        return len(self._index)

    def stats(self) -> dict[str, int]:
        return {
            "disk_cache_entries": len(self._index),
            "disk_cache_bytes": self.bytes,
            "disk_cache_writes": self.writes,
            "disk_cache_loads": self.loads,
        }
