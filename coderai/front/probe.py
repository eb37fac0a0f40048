"""Checks of model files, off the event loop. A check stats and reads a file, which on a
hung network mount can take any time, so each path is checked in its own thread under one
deadline per catalogue; a check that misses it is that model's error, never a stalled
front."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeAlias

from coderai.config import ModelEntry
from coderai.errors import ModelFileError, NotAFileOrFolder
from coderai.modelfile import detect_format

#: how long the checks of a catalogue's files may take; slower ones count as failed
PROBE_TIMEOUT_SECONDS = 5.0

#: a model's format, or why its file cannot be used
Probed: TypeAlias = str | ModelFileError
Detect: TypeAlias = Callable[[str], str]

_running: dict[tuple[Detect, str], concurrent.futures.Future[str]] = {}
_running_lock = threading.Lock()


async def probe(
    entries: Iterable[ModelEntry],
    timeout: float = PROBE_TIMEOUT_SECONDS,
    detect: Detect = detect_format,
) -> dict[str, Probed]:
    """model id -> the format the entry states, else the one its file shows, else why not."""
    out: dict[str, Probed] = {}
    paths: dict[str, str] = {}
    for entry in entries:
        if entry.format is not None:
            out[entry.id] = entry.format
        else:
            paths[entry.id] = entry.path
    checks = {path: asyncio.wrap_future(_check(path, detect)) for path in set(paths.values())}
    try:
        if checks:
            await asyncio.wait(checks.values(), timeout=timeout)
        for model_id, path in paths.items():
            out[model_id] = _outcome(path, checks[path], timeout)
    finally:
        for check in checks.values():
            check.cancel()  # stop waiting on late checks; their threads end on their own
    return out


def refusals(probed: Mapping[str, Probed]) -> list[str]:
    """Why a catalogue cannot be saved: the models whose path is a FIFO, socket or device."""
    return [
        f"model {model_id!r}: {result.message}"
        for model_id, result in probed.items()
        if isinstance(result, NotAFileOrFolder)
    ]


def same(a: Probed, b: Probed) -> bool:
    """One format, or errors that say the same thing."""
    if isinstance(a, ModelFileError) and isinstance(b, ModelFileError):
        return a.message == b.message
    return a == b


def _check(path: str, detect: Detect) -> concurrent.futures.Future[str]:
    """The check of this path still running, else a new one. A thread stuck in the kernel
    cannot be stopped, so later probes wait on it rather than pile up more stuck threads."""
    key = (detect, path)
    with _running_lock:
        future = _running.get(key)
        if future is None or future.done():  # a finished check is news from the past
            future = _running[key] = concurrent.futures.Future()
            future.set_running_or_notify_cancel()  # one waiter giving up cancels it for none
            # its own daemon thread, not an executor's: a stuck check must neither hold a
            # pool worker nor keep the process from exiting (pool workers are joined at exit)
            thread = threading.Thread(target=_run, args=(key, future), daemon=True)
            thread.start()
    return future


def _run(key: tuple[Detect, str], future: concurrent.futures.Future[str]) -> None:
    detect, path = key
    try:
        future.set_result(detect(path))
    except Exception as exc:  # whatever the check raised is that model's error
        future.set_exception(exc)
    finally:
        with _running_lock:
            if _running.get(key) is future:  # not a newer check of the same path
                del _running[key]


def _outcome(path: str, check: asyncio.Future[str], timeout: float) -> Probed:
    if not check.done():
        return ModelFileError(f"checking model file {path} took more than {timeout:g} s")
    error = check.exception()
    if error is None:
        return check.result()
    if isinstance(error, ModelFileError):
        return error
    return ModelFileError(f"cannot check model file {path}: {error}")
