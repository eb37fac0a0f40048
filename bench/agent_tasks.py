"""Every real coding agent on small real tasks with a real coding model, Qwen2.5-Coder-0.5B,
served by CoderAI and by llama.cpp's own `llama-server`, side by side in one run.

Each task is a folder of files and one instruction; after the agent's run the files it left
behind are judged (imported and called), never what it said. Each agent runs each task once
on each server, one run at a time, with the same model file, context and threads:

- CoderAI: `coderai run`, one engine, the model at a 32k context (its defaults otherwise);
- llama-server: built from the sources llama-cpp-python vendors (bench/llamacpp_peer.py),
  `--jinja` (its tool-call parsing), one slot holding the whole 32k context, the engine's
  batch, KV type, attention kernels and weight repacking (bench/llamacpp.same_kernels).

python -m bench.agents --model qwen-coder [--agents claude,codex,opencode,aider]
    [--tasks fix,create,edit] [--servers coderai,llama-server] [--seconds 420]
Needs tests/agents/install.sh and the model's chunk packages (tests/support/qwen.py).

What it does not show: agents are not deterministic across servers (each server samples
its own way at the agent's temperature), so one run per cell says what happened, not a
rate; a 0.5B model fails most of what a larger one does, on both servers alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer, free_port
from bench.llamacpp import Peer, same_kernels
from coderai.engine.backends.llamacpp.machine import cpu_model
from tests.support import agents, qwen

MODEL = "qwen-coder"
OUT = RESULTS / "agent_tasks.json"
CONTEXT = 32768
#: one agent run at most (Claude Code's first prompt alone is ~12.7k tokens on 2 cores)
AGENT_SECONDS = 420.0


@dataclass(frozen=True)
class Task:
    name: str
    files: dict[str, str]
    prompt: str
    #: judges the folder the agent left: what went wrong, or None when the task is done
    judge: Callable[[Path], str | None]


#: how long the judge lets a file the agent wrote run
JUDGE_SECONDS = 20.0
#: run in a child, in the task's folder: imports the module and prints the JSON of its
#: attribute, called with the arguments when it is a function
_JUDGE = """
import importlib, json, sys
value = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
args = json.loads(sys.argv[3])
print(json.dumps(value(*args) if callable(value) else value))
"""


def _call(folder: Path, module: str, name: str, *args: Any) -> Any:
    """What the agent's file gives: in a child process with a time limit (the model's
    code runs: it must not hang or touch the bench)."""
    if not (folder / f"{module}.py").exists():
        raise AssertionError(f"{module}.py does not exist")
    child = subprocess.run([sys.executable, "-c", _JUDGE, module, name, json.dumps(args)],
                           cwd=folder, capture_output=True, text=True, timeout=JUDGE_SECONDS,
                           check=False)  # fmt: skip
    if child.returncode:
        last = (child.stderr.strip().splitlines() or ["?"])[-1]
        raise AssertionError(f"{module}.{name}: {last}")
    return json.loads(child.stdout)


def _expect(check: Callable[[Path], Any], want: Any) -> Callable[[Path], str | None]:
    def judge(folder: Path) -> str | None:
        try:
            got = check(folder)
        except Exception as exc:  # the agent's file is the thing judged: any fault is a miss
            return f"{type(exc).__name__}: {exc}"[:200]
        return None if got == want else f"got {got!r}, want {want!r}"

    return judge


BUGGY_AVERAGE = '''def average(numbers):
    """The mean of a non-empty list."""
    return sum(numbers) / (len(numbers) + 1)
'''

TASKS = [
    Task(
        "fix",
        {"stats.py": BUGGY_AVERAGE},
        "Fix the bug in the function average in stats.py: it divides by the wrong count.",
        _expect(lambda f: _call(f, "stats", "average", [1, 2, 3, 6]), 3),
    ),
    Task(
        "create",
        {},
        "Create a file greet.py with a function greet(name) that returns the string"
        " 'Hello, ' + name + '!'.",
        _expect(lambda f: _call(f, "greet", "greet", "Ada"), "Hello, Ada!"),
    ),
    Task(
        "edit",
        {"settings.py": 'HOST = "127.0.0.1"\nPORT = 8000\nDEBUG = False\n'},
        "In settings.py, change PORT from 8000 to 9090. Change nothing else.",
        _expect(
            lambda f: (_call(f, "settings", "PORT"), _call(f, "settings", "HOST")),
            (9090, "127.0.0.1"),
        ),
    ),
]


def run_agent(
    agent: str, url: str, home: Path, prompt: str, files: list[str], seconds: float
) -> agents.Run:
    if agent == "claude":
        return agents.claude(url, home, MODEL, prompt, seconds)
    if agent == "codex":
        return agents.codex(url, home, MODEL, prompt, seconds)
    if agent == "opencode":
        return agents.opencode(url, home, MODEL, prompt, seconds)
    return agents.aider(url, home, MODEL, prompt, seconds, CONTEXT, files=files)


def one(agent: str, task: Task, url: str, seconds: float) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"task-{agent}-{task.name}-"))
    work = home / "work"
    work.mkdir()
    for name, text in task.files.items():
        (work / name).write_text(text)
    started = time.monotonic()
    done = run_agent(agent, url, home, task.prompt, list(task.files), seconds)
    seconds = time.monotonic() - started
    miss = task.judge(work)
    shutil.rmtree(home, ignore_errors=True)
    return {"agent": agent, "task": task.name, "done": miss is None, "why": miss,
            "seconds": round(seconds, 1), "exit": done.code,
            "output": done.output[-800:], "errors": done.errors[-800:]}  # fmt: skip


class Serving:
    """One of the two servers, started for the run and stopped after it."""

    def __init__(self, name: str, gguf: Path) -> None:
        self.name = name
        threads = len(os.sched_getaffinity(0))
        if name == "coderai":
            models = [{"id": MODEL, "path": str(gguf), "options": {"n_ctx": CONTEXT}}]
            self._coderai: BenchServer | None = BenchServer({}, models, 1)
            self.url = self._coderai.url
            self._peer: Peer | None = None
            return
        from bench.llamacpp_peer import ensure_built

        binary = ensure_built()["llama-server"]
        port = free_port()
        self._coderai = None
        self._peer = Peer([str(binary), "-m", str(gguf), "--port", str(port), "-c", str(CONTEXT),
                           "-np", "1", "-t", str(threads), "-tb", str(threads), "--jinja",
                           "--alias", MODEL, *same_kernels({}, "llama-server"), "--no-webui"],
                          port)  # fmt: skip
        self.url = self._peer.url

    def stop(self) -> None:
        if self._coderai is not None:
            self._coderai.stop()
        if self._peer is not None:
            self._peer.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[MODEL], required=True)
    parser.add_argument("--agents", default="claude,codex,opencode,aider")
    parser.add_argument("--tasks", default=",".join(t.name for t in TASKS))
    parser.add_argument("--servers", default="coderai,llama-server")
    parser.add_argument("--seconds", type=float, default=AGENT_SECONDS)
    args = parser.parse_args(argv)
    tasks = [t for t in TASKS if t.name in args.tasks.split(",")]
    gguf = qwen.gguf()
    rows = []
    for server in args.servers.split(","):
        serving = Serving(server, gguf)
        try:
            for agent in args.agents.split(","):
                for task in tasks:
                    row = {"server": server, **one(agent, task, serving.url, args.seconds)}
                    print(f"{server} {agent} {task.name}: done={row['done']} "
                          f"{row['seconds']} s {row['why'] or ''}", flush=True)  # fmt: skip
                    rows.append(row)
                    # as it goes: a run cut short keeps what it found
                    OUT.write_text(json.dumps(result(rows), indent=2) + "\n")
        finally:
            serving.stop()
    save(result(rows), OUT)
    return 0


def result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "context": CONTEXT, "cpu": _cpu(), "rows": rows}


def _cpu() -> str:
    return cpu_model(Path("/proc/cpuinfo").read_text())


if __name__ == "__main__":  # the same as `python -m bench.agents --model qwen-coder ...`
    sys.exit(main(sys.argv[1:]))
