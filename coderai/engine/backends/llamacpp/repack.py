"""Whether llama.cpp's CPU "extra buffer types" (repacked weights, AMX) are on for a model:
decided by trial on this machine, kept, and healed when a model dies of them anyway.

- A model entry's `extra_buffer_types` forces either way.
- Else a model this machine has seen die of them (below) has them off.
- Else the machine's verdict: a trial (probe.py) run once per machine and llama.cpp build,
  kept in `<state>/machine/llamacpp-<key>.json`; the key covers the CPU's model name and
  flags, llama.cpp's build info and version, and the test seam's setting. Only what the
  kernels did is kept (they ran, or the child died of a signal); a trial that failed
  otherwise (a timeout, a broken install) leaves them off for this start only.

Healing: while a model is loaded with them on, its file is listed in
`<state>/machine/live-<pid>.json`. The supervisor starts an engine's next incarnation with
the last one's pid and exit (CODERAI_PREVIOUS_EXIT="pid:code"); where that was SIGILL or
SIGBUS, the models the dead one listed are kept off from then on (in
`<state>/machine/heals-<key>.json`, written at once), and the engine says so. A model that
dies so with them off is not listed, so a second death is a crash like any other. The
engines of one machine share these files: each write is whole (a temporary file renamed)
and made under a lock file, so two never lose each other's heals or both run the trial.

Nothing here imports llama_cpp at import time, and a heal's write alone imports it (for the
build's key).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coderai.common.exits import exit_words, signal_name
from coderai.engine.backends.llamacpp import probe
from coderai.engine.backends.llamacpp.machine import (
    MachineFiles,
    build,
    cpu_model,
    cpuinfo,
    locked,
    read_json,
    write_json,
)

log = logging.getLogger("coderai.engine")

#: "pid:code" of the incarnation this engine replaces (the supervisor sets it)
PREVIOUS_VARIABLE = "CODERAI_PREVIOUS_EXIT"
#: deaths that a kernel the CPU cannot run causes, and that a restart without them heals
HEALED_BY = frozenset({"SIGILL", "SIGBUS"})


@dataclass(frozen=True)
class Decision:
    on: bool
    why: str


def decide(option: object, off_for: dict[str, Any], verdict: dict[str, Any], path: str) -> Decision:
    """A model's decision from its entry's option, the heals and the verdict (pure)."""
    if option is not None:
        return Decision(bool(option), "the model entry says so (extra_buffer_types)")
    if path in off_for:
        return Decision(False, str(off_for[path]))
    return Decision(bool(verdict["works"]), str(verdict["why"]))


class Kernels:
    """This process's decisions (one instance: KERNELS). The loader thread decides (and
    may run the trial, without holding the state's lock, so the heartbeat's report never
    waits for it); the scheduler thread releases; the event loop reads the report."""

    def __init__(self, folder: Path | None = None, key: str | None = None) -> None:
        #: the machine's files (machine.py)
        self.files = MachineFiles(folder, key)
        #: the state below; held only to read or change it
        self._lock = threading.Lock()
        #: the machine's verdict, once read or tried (set once)
        self._verdict: dict[str, Any] | None = None
        #: model files kept off on this machine since they died of them, and why (read
        #: from the heals file at each decision: another engine may have added some)
        self._off_for: dict[str, str] = {}
        #: instances loaded with them on now (the live list): model id -> (file, count)
        self._live: dict[str, tuple[str, int]] = {}
        #: the decision of each model loaded or loading, and its instances, by model id
        self._decided: dict[str, tuple[Decision, int]] = {}

    @property
    def folder(self) -> Path:
        return self.files.folder

    def _path(self, kind: str) -> Path:
        """This machine's and build's file of a kind: the verdict ("llamacpp") or the
        models kept off ("heals")."""
        return self.files.path(kind)

    def _live_path(self, pid: int | str | None = None) -> Path:
        return self.folder / f"live-{pid if pid is not None else os.getpid()}.json"

    # -- at start --------------------------------------------------------------------------
    def after(self, previous: str) -> None:
        """The engine starts in place of an incarnation that ended so ("pid:code"): its
        live list is read and removed; a SIGILL or SIGBUS keeps its models off from now
        on, written at once (this incarnation may die before it loads anything)."""
        with contextlib.suppress(OSError):  # a list under this pid is an older process's
            self._live_path().unlink()
        pid, _, code = previous.partition(":")
        if not (pid.isdigit() and code.lstrip("-").isdigit()):
            return
        marker = self._live_path(pid)
        listed = read_json(marker) or {}
        with contextlib.suppress(OSError):
            marker.unlink()
        if signal_name(int(code)) not in HEALED_BY or not listed:
            return
        why = (f"the engine {exit_words(int(code))} with them on for this model; it is"
               f" loaded with them off on this machine from now on")  # fmt: skip
        for model_id in listed:
            log.warning("model %s: llama.cpp's extra buffer types: %s", model_id, why)
        with locked(self.folder):
            heals = self._path("heals")
            write_json(
                heals,
                {**(read_json(heals) or {}), **dict.fromkeys(map(str, listed.values()), why)},
            )

    # -- the loader thread ----------------------------------------------------------------
    def decide(self, option: object, path: str, model_id: str) -> Decision:
        """Whether a model loads with the extra buffer types on, trying the machine first
        where nothing is kept yet."""
        if option is None:
            verdict = self._machine()
            off_for = read_json(self._path("heals")) or {}
            decision = decide(option, off_for, verdict, path)
        else:
            off_for = None
            decision = decide(option, {}, {}, path)
        with self._lock:
            if off_for is not None:
                self._off_for = off_for
            _, instances = self._decided.get(model_id, (decision, 0))
            self._decided[model_id] = (decision, instances + 1)
            if decision.on:
                _, count = self._live.get(model_id, (path, 0))
                self._live[model_id] = (path, count + 1)
                self._write_live()
        log.info("model %s: llama.cpp's extra buffer types %s: %s", model_id,
                 "on" if decision.on else "off", decision.why)  # fmt: skip
        return decision

    def machine_on(self) -> bool:
        """This machine's verdict alone (tried where none is kept): what a peer measured
        beside the engine is given (bench/)."""
        return bool(self._machine()["works"])

    def _machine(self) -> dict[str, Any]:
        """The machine's verdict: kept, or tried now. One engine of the machine tries at a
        time (a lock file); the others then read what it kept."""
        if self._verdict is not None:
            return self._verdict
        path = self._path("llamacpp")
        with locked(self.folder):
            kept = read_json(path)
            if kept is not None and isinstance(kept.get("works"), bool):
                log.info("llama.cpp's extra buffer types: this machine's verdict, kept in"
                         " %s: %s", path, kept.get("why"))  # fmt: skip
                verdict = {**kept, "kept": True}
            else:
                verdict = self._try(path)
        with self._lock:
            self._verdict = verdict
        return verdict

    def _try(self, path: Path) -> dict[str, Any]:
        cpu = cpu_model(cpuinfo())
        log.info("llama.cpp's extra buffer types: trying them on this machine (%s)", cpu)
        trial = probe.run()
        info, version = build()
        verdict = {**asdict(trial), "cpu": cpu, "build": info, "version": version,
                   "decided_at": time.time()}  # fmt: skip
        # what the kernels did is kept; a trial that failed otherwise (a timeout on a busy
        # machine, a broken install) says nothing of them: tried again at the next start
        keep = trial.works or trial.signal is not None
        if keep:
            write_json(path, verdict)
        (log.info if trial.works else log.warning)(
            "llama.cpp's extra buffer types %s on this machine: %s (%.1f s; %s)",
            "on" if trial.works else "off", trial.why, trial.seconds,
            f"kept in {path}" if keep else "not kept: tried again at the next start",
        )  # fmt: skip
        return {**verdict, "kept": False}

    # -- the scheduler thread -------------------------------------------------------------
    def released(self, model_id: str) -> None:
        """An instance of a model is gone: its count goes down, and at none the model is
        off the live list."""
        with self._lock:
            decision, instances = self._decided.get(model_id, (None, 0))
            if decision is not None:
                if instances > 1:
                    self._decided[model_id] = (decision, instances - 1)
                else:
                    del self._decided[model_id]
            path, count = self._live.get(model_id, ("", 0))
            if count:
                if count > 1:
                    self._live[model_id] = (path, count - 1)
                else:
                    del self._live[model_id]
                self._write_live()

    def _write_live(self) -> None:
        write_json(self._live_path(), {m: path for m, (path, _) in self._live.items()})

    # -- the event loop -------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """What was decided, for the heartbeat: the machine's verdict (once tried or
        read) and each loaded model's decision."""
        with self._lock:
            out: dict[str, Any] = {
                "models": {m: {"on": d.on, "why": d.why} for m, (d, _) in self._decided.items()}
            }
            verdict = self._verdict
            if verdict is not None:
                out["machine"] = {
                    "on": bool(verdict["works"]),
                    "why": str(verdict["why"]),
                    "signal": verdict.get("signal"),
                    "kept": bool(verdict.get("kept")),
                    "cpu": str(verdict.get("cpu", "")),
                    "off_for": len(self._off_for),
                }
            return out

    def close(self) -> None:
        """A clean exit: the live list goes with the process."""
        with contextlib.suppress(OSError):
            self._live_path().unlink()


#: this process's decisions
KERNELS = Kernels()
