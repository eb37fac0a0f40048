"""The machine folder: what llama.cpp engines learn of their machine, kept between starts
and shared by the engines of one machine (repack.py's verdict and heals, attention.py's
timed costs).

Each kind of fact is a JSON file named by the machine's key: the CPU's model and flags,
llama.cpp's build info and version, and the test seam's setting, so a new CPU or build
learns afresh. Each write is whole (a temporary file renamed) and made under a lock file,
so two engines never lose each other's writes or both take the same measure.

Nothing here imports llama_cpp at import time; naming a file does (for the build's key).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coderai.engine import die_at
from coderai.engine.backends.llamacpp.cpu_features import CPUINFO, cpu_flags

#: where the front keeps its state (the supervisor sets it for its engines)
STATE_VARIABLE = "CODERAI_STATE_DIR"
#: where what engines learn of the machine is kept, where not in the state folder (servers
#: of one machine may share it: the test suite's do)
MACHINE_VARIABLE = "CODERAI_MACHINE_DIR"


def state_folder() -> Path:
    """Where this machine's facts are kept: the folder CODERAI_MACHINE_DIR names, else
    the front's state folder for its engines, else the user's state folder."""
    if os.environ.get(MACHINE_VARIABLE):
        return Path(os.environ[MACHINE_VARIABLE])
    state = os.environ.get(STATE_VARIABLE)
    if not state:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        state = str(Path(base) / "coderai")
    return Path(state) / "machine"


def machine_key(cpuinfo: str, build: str, version: str, seam: str) -> str:
    """Names a machine's facts: the same CPU model and flags, llama.cpp build and seam
    (pure)."""
    facts = [cpu_model(cpuinfo), " ".join(sorted(cpu_flags(cpuinfo))), build, version, seam]
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return "unknown CPU"


def cpuinfo() -> str:
    try:
        return CPUINFO.read_text()
    except OSError:
        return ""


def build() -> tuple[str, str]:
    """The loaded llama.cpp's build info (its CPU backend's features) and version."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    return info, str(getattr(llama_cpp, "__version__", ""))


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(temp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """The machine's files, one process at a time (an advisory lock on a file beside
    them: every engine of the machine, and a measure they would otherwise all take)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class MachineFiles:
    """This machine's files in its folder (tests give their own folder and key)."""

    def __init__(self, folder: Path | None = None, key: str | None = None) -> None:
        self._folder = folder
        #: names this machine's files (machine_key), once known
        self._key = key

    @property
    def folder(self) -> Path:
        return self._folder or state_folder()

    def path(self, kind: str) -> Path:
        """This machine's and build's file of a kind."""
        if self._key is None:
            info, version = build()
            seam = os.environ.get(die_at.VARIABLE, "")
            self._key = machine_key(cpuinfo(), info, version, seam)
        return self.folder / f"{kind}-{self._key}.json"

    def kept(
        self,
        kind: str,
        key: str,
        take: Callable[[], dict[str, Any]],
        fresh: Callable[[dict[str, Any]], bool] = lambda _: True,
    ) -> dict[str, Any]:
        """A measure kept in the file of a kind under a key: read where it is there and
        `fresh`, else taken now and kept (one engine of the machine takes it; the others
        wait and read it). What `take` raises is not kept."""
        with locked(self.folder):
            path = self.path(kind)
            kept = read_json(path) or {}
            value = kept.get(key)
            if isinstance(value, dict) and fresh(value):
                return value
            value = take()
            write_json(path, {**kept, key: value})
            return value


#: this process's machine files
FILES = MachineFiles()
