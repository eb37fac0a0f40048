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
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coderai.common.exits import exit_words, signal_name
from coderai.engine import die_at
from coderai.engine.backends.llamacpp import probe
from coderai.engine.backends.llamacpp.cpu_features import CPUINFO, cpu_flags

log = logging.getLogger("coderai.engine")

#: where the front keeps its state (the supervisor sets it for its engines)
STATE_VARIABLE = "CODERAI_STATE_DIR"
#: where what engines learn of the machine is kept, where not in the state folder (servers
#: of one machine may share it: the test suite's do)
MACHINE_VARIABLE = "CODERAI_MACHINE_DIR"
#: "pid:code" of the incarnation this engine replaces (the supervisor sets it)
PREVIOUS_VARIABLE = "CODERAI_PREVIOUS_EXIT"
#: deaths that a kernel the CPU cannot run causes, and that a restart without them heals
HEALED_BY = frozenset({"SIGILL", "SIGBUS"})


@dataclass(frozen=True)
class Decision:
    on: bool
    why: str


def state_folder() -> Path:
    """Where this machine's verdicts are kept: the folder CODERAI_MACHINE_DIR names, else
    the front's state folder for its engines, else the user's state folder."""
    if os.environ.get(MACHINE_VARIABLE):
        return Path(os.environ[MACHINE_VARIABLE])
    state = os.environ.get(STATE_VARIABLE)
    if not state:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        state = str(Path(base) / "coderai")
    return Path(state) / "machine"


def machine_key(cpuinfo: str, build: str, version: str, seam: str) -> str:
    """Names a verdict: the same CPU model and flags, llama.cpp build and seam (pure)."""
    facts = [cpu_model(cpuinfo), " ".join(sorted(cpu_flags(cpuinfo))), build, version, seam]
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return "unknown CPU"


def decide(option: object, off_for: dict[str, Any], verdict: dict[str, Any], path: str) -> Decision:
    """A model's decision from its entry's option, the heals and the verdict (pure)."""
    if option is not None:
        return Decision(bool(option), "the model entry says so (extra_buffer_types)")
    if path in off_for:
        return Decision(False, str(off_for[path]))
    return Decision(bool(verdict["works"]), str(verdict["why"]))


def _build() -> tuple[str, str]:
    """The loaded llama.cpp's build info (its CPU backend's features) and version."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    return info, str(getattr(llama_cpp, "__version__", ""))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(temp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Kernels:
    """This process's decisions (one instance: KERNELS). The loader thread decides (and
    may run the trial, without holding the state's lock, so the heartbeat's report never
    waits for it); the scheduler thread releases; the event loop reads the report."""

    def __init__(self, folder: Path | None = None, key: str | None = None) -> None:
        self._folder = folder
        #: names this machine's verdict (machine_key; tests give their own)
        self._key = key
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
        return self._folder or state_folder()

    def _path(self, kind: str) -> Path:
        """This machine's and build's file of a kind: the verdict ("llamacpp") or the
        models kept off ("heals")."""
        if self._key is None:
            try:
                cpuinfo = CPUINFO.read_text()
            except OSError:
                cpuinfo = ""
            build, version = _build()
            self._key = machine_key(cpuinfo, build, version, os.environ.get(die_at.VARIABLE, ""))
        return self.folder / f"{kind}-{self._key}.json"

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
        listed = _read_json(marker) or {}
        with contextlib.suppress(OSError):
            marker.unlink()
        if signal_name(int(code)) not in HEALED_BY or not listed:
            return
        why = (f"the engine {exit_words(int(code))} with them on for this model; it is"
               f" loaded with them off on this machine from now on")  # fmt: skip
        for model_id in listed:
            log.warning("model %s: llama.cpp's extra buffer types: %s", model_id, why)
        with _locked(self.folder):
            heals = self._path("heals")
            _write_json(
                heals,
                {**(_read_json(heals) or {}), **dict.fromkeys(map(str, listed.values()), why)},
            )

    # -- the loader thread ----------------------------------------------------------------
    def decide(self, option: object, path: str, model_id: str) -> Decision:
        """Whether a model loads with the extra buffer types on, trying the machine first
        where nothing is kept yet."""
        if option is None:
            verdict = self._machine()
            off_for = _read_json(self._path("heals")) or {}
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
        with _locked(self.folder):
            kept = _read_json(path)
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
        try:
            cpuinfo = CPUINFO.read_text()
        except OSError:
            cpuinfo = ""
        log.info("llama.cpp's extra buffer types: trying them on this machine (%s)",
                 cpu_model(cpuinfo))  # fmt: skip
        trial = probe.run()
        build, version = _build()
        verdict = {**asdict(trial), "cpu": cpu_model(cpuinfo), "build": build,
                   "version": version, "decided_at": time.time()}  # fmt: skip
        # what the kernels did is kept; a trial that failed otherwise (a timeout on a busy
        # machine, a broken install) says nothing of them: tried again at the next start
        keep = trial.works or trial.signal is not None
        if keep:
            _write_json(path, verdict)
        (log.info if trial.works else log.warning)(
            "llama.cpp's extra buffer types %s on this machine: %s (%.1f s; %s)",
            "on" if trial.works else "off", trial.why, trial.seconds,
            f"kept in {path}" if keep else "not kept: tried again at the next start",
        )  # fmt: skip
        return {**verdict, "kept": False}

    def kept(self, kind: str, key: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A measure of this machine, kept in its file of a kind under a key: read, or
        taken now and kept (one engine of the machine takes it; the others wait and read
        it). What `take` raises is not kept: it is taken again at the next load."""
        with _locked(self.folder):
            path = self._path(kind)
            kept = _read_json(path) or {}
            value = kept.get(key)
            if isinstance(value, dict):
                return value
            value = take()
            _write_json(path, {**kept, key: value})
            return value

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
        _write_json(self._live_path(), {m: path for m, (path, _) in self._live.items()})

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


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """The machine's files, one process at a time (an advisory lock on a file beside
    them: every engine of the machine, and a trial they would otherwise all run)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: this process's decisions
KERNELS = Kernels()
