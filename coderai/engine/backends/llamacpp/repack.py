"""Whether llama.cpp's CPU "extra buffer types" (repacked weights, AMX) are on for a model:
decided by trial on this machine, kept, and healed when a model dies of them anyway.

- A model entry's `extra_buffer_types` forces either way.
- Else a model this machine has seen die of them (below) has them off.
- Else the machine's verdict: a trial (probe.py) run once per machine and llama.cpp build,
  kept in `<state>/machine/llamacpp-<key>.json`; the key covers the CPU's model name and
  flags, llama.cpp's build info and version, and the test seam's setting.

Healing: while a model is loaded with them on, its file is listed in
`<state>/machine/live-<pid>.json`. The supervisor starts an engine's next incarnation with
the last one's pid and exit (CODERAI_PREVIOUS_EXIT="pid:code"); where that was SIGILL or
SIGBUS, the models the dead one listed are kept off from then on (in the verdict's
`off_for`), and the engine says so. A model that dies so with them off is not listed, so a
second death is a crash like any other.

Nothing here imports llama_cpp at import time: the engine reads its predecessor's list at
start, before any backend is loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coderai.engine import die_at
from coderai.engine.backends.llamacpp import probe
from coderai.engine.backends.llamacpp.cpu_features import CPUINFO, cpu_flags
from coderai.exits import exit_words, signal_name

log = logging.getLogger("coderai.engine")

#: where the front keeps its state (the supervisor sets it for its engines)
STATE_VARIABLE = "CODERAI_STATE_DIR"
#: "pid:code" of the incarnation this engine replaces (the supervisor sets it)
PREVIOUS_VARIABLE = "CODERAI_PREVIOUS_EXIT"
#: deaths that a kernel the CPU cannot run causes, and that a restart without them heals
HEALED_BY = frozenset({"SIGILL", "SIGBUS"})


@dataclass(frozen=True)
class Decision:
    on: bool
    why: str


def state_folder() -> Path:
    """Where this machine's verdicts are kept: the front's state folder for its engines,
    else the user's state folder."""
    state = os.environ.get(STATE_VARIABLE)
    if not state:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        state = str(Path(base) / "coderai")
    return Path(state) / "machine"


def machine_key(cpuinfo: str, build: str, version: str, seam: str) -> str:
    """Names a verdict: the same CPU model and flags, llama.cpp build and seam (pure)."""
    model = next((line.partition(":")[2].strip() for line in cpuinfo.splitlines()
                  if line.partition(":")[0].strip() == "model name"), "")  # fmt: skip
    facts = [model, " ".join(sorted(cpu_flags(cpuinfo))), build, version, seam]
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return "unknown CPU"


def decide(option: object, off_for: dict[str, str], verdict: dict[str, Any], path: str) -> Decision:
    """A model's decision from its entry's option, the heals and the verdict (pure)."""
    if option is not None:
        return Decision(bool(option), "the model entry says so (extra_buffer_types)")
    if path in off_for:
        return Decision(False, off_for[path])
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
    """This process's decisions (one instance: KERNELS). The loader thread decides and
    lists; the scheduler thread releases; the event loop reads the report: a lock keeps
    them apart."""

    def __init__(self, folder: Path | None = None, key: str | None = None) -> None:
        self._folder = folder
        #: names this machine's verdict (machine_key; tests give their own)
        self._key = key
        self._lock = threading.Lock()
        self._verdict: dict[str, Any] | None = None
        self._path: Path | None = None
        #: model files the last incarnation had on when it died of SIGILL/SIGBUS, and how
        self._pending: dict[str, str] = {}
        #: model files loaded with them on now (the live list), by model id
        self._live: dict[str, str] = {}
        #: the decision of each model loaded or loading, by model id
        self._decided: dict[str, Decision] = {}

    @property
    def folder(self) -> Path:
        return self._folder or state_folder()

    # -- at start --------------------------------------------------------------------------
    def after(self, previous: str) -> None:
        """The engine starts in place of an incarnation that ended so ("pid:code"): its
        live list is read and removed; a SIGILL or SIGBUS makes its models pending heals."""
        pid, _, code = previous.partition(":")
        if not (pid.isdigit() and code.lstrip("-").isdigit()):
            return
        marker = self.folder / f"live-{pid}.json"
        listed = _read_json(marker) or {}
        with contextlib.suppress(OSError):
            marker.unlink()
        if signal_name(int(code)) not in HEALED_BY:
            return
        for model_id, path in listed.items():
            why = (f"the engine {exit_words(int(code))} with them on for this model; it is"
                   f" loaded with them off on this machine from now on")  # fmt: skip
            self._pending[str(path)] = why
            log.warning("model %s: llama.cpp's extra buffer types: %s", model_id, why)

    # -- the loader thread ----------------------------------------------------------------
    def decide(self, option: object, path: str, model_id: str) -> Decision:
        """Whether a model loads with the extra buffer types on, trying the machine first
        where nothing is kept yet."""
        with self._lock:
            off_for: dict[str, str] = {}
            verdict: dict[str, Any] = {"works": True, "why": ""}
            if option is None:
                verdict = self._machine_verdict()
                off_for = verdict.setdefault("off_for", {})
                if self._pending:
                    off_for.update(self._pending)
                    self._pending.clear()
                    assert self._path is not None
                    _write_json(self._path, verdict)
            decision = decide(option, off_for, verdict, path)
            self._decided[model_id] = decision
            state = "on" if decision.on else "off"
            log.info("model %s: llama.cpp's extra buffer types %s: %s", model_id, state,
                     decision.why)  # fmt: skip
            if decision.on:
                self._live[model_id] = path
                _write_json(self.folder / f"live-{os.getpid()}.json", dict(self._live))
            return decision

    def machine_on(self) -> bool:
        """This machine's verdict alone (tried where none is kept): what a peer measured
        beside the engine is given (bench/)."""
        with self._lock:
            return bool(self._machine_verdict()["works"])

    def _machine_verdict(self) -> dict[str, Any]:
        if self._verdict is not None:
            return self._verdict
        try:
            cpuinfo = CPUINFO.read_text()
        except OSError:
            cpuinfo = ""
        build, version = _build()
        if self._key is None:
            seam = os.environ.get(die_at.VARIABLE, "")
            self._key = machine_key(cpuinfo, build, version, seam)
        self._path = self.folder / f"llamacpp-{self._key}.json"
        kept = _read_json(self._path)
        if kept is not None and isinstance(kept.get("works"), bool):
            log.info("llama.cpp's extra buffer types: this machine's verdict, kept in %s: %s",
                     self._path, kept.get("why"))  # fmt: skip
            kept["kept"] = True
            self._verdict = kept
            return kept
        log.info("llama.cpp's extra buffer types: trying them on this machine (%s)",
                 cpu_model(cpuinfo))  # fmt: skip
        trial = probe.run()
        verdict = {**asdict(trial), "cpu": cpu_model(cpuinfo), "build": build,
                   "version": version, "decided_at": time.time(), "off_for": {}}  # fmt: skip
        _write_json(self._path, verdict)
        (log.info if trial.works else log.warning)(
            "llama.cpp's extra buffer types %s on this machine: %s (%.1f s; kept in %s)",
            "on" if trial.works else "off", trial.why, trial.seconds, self._path,
        )  # fmt: skip
        verdict["kept"] = False
        self._verdict = verdict
        return verdict

    # -- the scheduler thread -------------------------------------------------------------
    def released(self, model_id: str) -> None:
        """A model's instance is gone: off the live list."""
        with self._lock:
            self._decided.pop(model_id, None)
            if self._live.pop(model_id, None) is not None:
                _write_json(self.folder / f"live-{os.getpid()}.json", dict(self._live))

    # -- the event loop -------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """What was decided, for the heartbeat: the machine's verdict (once tried or
        read) and each loaded model's decision."""
        with self._lock:
            out: dict[str, Any] = {
                "models": {m: {"on": d.on, "why": d.why} for m, d in self._decided.items()}
            }
            if self._verdict is not None:
                out["machine"] = {
                    "on": bool(self._verdict["works"]),
                    "why": str(self._verdict["why"]),
                    "signal": self._verdict.get("signal"),
                    "kept": bool(self._verdict.get("kept")),
                    "cpu": str(self._verdict.get("cpu", "")),
                    "off_for": len(self._verdict.get("off_for", {})),
                }
            return out

    def close(self) -> None:
        """A clean exit: the live list goes with the process."""
        with contextlib.suppress(OSError):
            (self.folder / f"live-{os.getpid()}.json").unlink()


#: this process's decisions
KERNELS = Kernels()
