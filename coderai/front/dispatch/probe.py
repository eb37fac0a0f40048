"""Checks of model files and reads of chat template files, off the event loop. A check
stats and reads a file, which on a hung network mount can take any time, so each path is
checked in its own thread under one deadline per catalogue; a check that misses it is that
model's error, never a stalled front."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeAlias

from coderai.catalogue import model_options
from coderai.catalogue.entries import Catalogue, ModelEntry
from coderai.catalogue.file_format import detect_format, required_capability
from coderai.catalogue.templatefile import TEMPLATE_OPTION, template_text
from coderai.errors import ConfigError, ModelFileError, NotAFileOrFolder

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


async def with_templates(
    catalogue: Catalogue,
    timeout: float = PROBE_TIMEOUT_SECONDS,
    read: Detect = template_text,
) -> Catalogue:
    """The catalogue with the text of its entries' chat_template options: inline, or read
    from the file named. A template that cannot be used (no such file, a read past the
    deadline, a template that does not compile) is a ConfigError naming its model, so a
    catalogue with one is refused when it is loaded or saved, not at a request."""
    given = {e.id: e.options[TEMPLATE_OPTION] for e in catalogue.entries
             if TEMPLATE_OPTION in e.options}  # fmt: skip
    reads = {value: asyncio.wrap_future(_check(value, read)) for value in set(given.values())}
    try:
        if reads:
            await asyncio.wait(reads.values(), timeout=timeout)
        templates: dict[str, str] = {}
        for model_id, value in given.items():
            done = reads[value]
            where = f"model {model_id!r}: options.{TEMPLATE_OPTION}"
            if not done.done():
                raise ConfigError(f"{where}: reading {value} took more than {timeout:g} s")
            error = done.exception()
            if error is not None:
                why = error.message if isinstance(error, ConfigError) else repr(error)
                raise ConfigError(f"{where}: {why}")
            templates[model_id] = done.result()
    finally:
        for pending in reads.values():
            pending.cancel()
    return Catalogue(catalogue.entries, templates)


def refusals(probed: Mapping[str, Probed], entries: Iterable[ModelEntry] = ()) -> list[str]:
    """Why a catalogue cannot be saved: the models whose path is a FIFO, socket or device,
    and those with an option that the backend their file needs does not read (an entry
    that states its format had its options checked as it was read)."""
    out = [
        f"model {model_id!r}: {result.message}"
        for model_id, result in probed.items()
        if isinstance(result, NotAFileOrFolder)
    ]
    for entry in entries:
        found = probed.get(entry.id)
        if entry.format is None and isinstance(found, str):
            why = model_options.refusal(entry.options, required_capability(found, entry.options))
            if why is not None:
                out.append(f"model {entry.id!r}: {why}")
    return out


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
