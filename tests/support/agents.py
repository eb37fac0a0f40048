"""The real coding agents, run as their users run them against a CoderAI server: each with
its own HOME, no terminal, nothing on stdin, and its stock configuration but for the base
URL, the key and the model name. tests/integration/test_agents.py and bench/agents.py
drive them; tests/agents/install.sh installs them into .agents/.

Each launcher returns the run's output, errors, exit status and wall time, and judges
nothing: the callers say what a run must show.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AGENTS = Path(__file__).resolve().parents[2] / ".agents"
BIN = AGENTS / "node_modules" / ".bin"
AIDER = AGENTS / "aider" / "bin" / "aider"
KEY = "sk-coderai-test"


class AgentMissing(AssertionError):
    """An agent is not installed (tests/agents/install.sh installs them)."""


@dataclass
class Run:
    output: str
    errors: str
    code: int
    seconds: float

    def describe(self) -> str:
        head = f"exit {self.code} after {self.seconds:.1f} s"
        return f"{head}\nstdout:\n{self.output}\nstderr:\n{self.errors}"


def start(argv: list[str], home: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """An agent's process: its own HOME and session (past a timeout its whole tree goes:
    Codex's and opencode's native binaries run under their node launchers), its output
    piped, stdin closed (Codex and opencode wait for more input on an open one)."""
    if not Path(argv[0]).exists():
        raise AgentMissing(f"{argv[0]} is not installed: run tests/agents/install.sh")
    node = shutil.which("node")
    if node is None:
        raise AgentMissing("Node.js, which runs the npm agents, is not installed")
    path = os.pathsep.join([str(BIN), str(Path(node).parent), "/usr/bin", "/bin"])
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        argv, cwd=work, env={"PATH": path, "HOME": str(home), **env}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def run(argv: list[str], env: dict[str, str], *, home: Path, timeout: float) -> Run:
    """One run to its end, or killed past `timeout`."""
    start_at = time.monotonic()
    proc = start(argv, home, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(killed after {timeout:.0f} s)"
    finally:
        with contextlib.suppress(ProcessLookupError):  # anything it left behind
            os.killpg(proc.pid, signal.SIGKILL)
    return Run(out, err, proc.returncode, time.monotonic() - start_at)


#: an agent's command line and environment
Launch = tuple[list[str], dict[str, str]]


def claude_launch(url: str, model: str, prompt: str, output: str = "json") -> Launch:
    """Claude Code in print mode; `--allowedTools Bash` is a user's one-time "yes" to
    running commands. Its `json` output is a result whose answer is `result`."""
    env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_MODEL": model}
    argv = [str(BIN / "claude"), "-p", prompt, "--output-format", output, "--allowedTools", "Bash"]
    if output == "stream-json":  # every streamed event as it comes
        argv += ["--verbose", "--include-partial-messages"]
    return argv, env


def claude(url: str, home: Path, model: str, prompt: str, timeout: float) -> Run:
    return run(*claude_launch(url, model, prompt), home=home, timeout=timeout)


def claude_result(done: Run) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(done.output)
    return result


def codex_launch(url: str, home: Path, model: str, prompt: str) -> Launch:
    """Codex CLI's exec mode with a custom provider (its documented way to another
    server), its last message written to home/last.txt."""
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "coderai"\n\n'
        "[model_providers.coderai]\n"
        f'name = "CoderAI"\nbase_url = "{url}/v1"\nenv_key = "CODERAI_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    argv = [str(BIN / "codex"), "exec", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-o", str(home / "last.txt"),
            prompt]  # fmt: skip
    return argv, {"CODERAI_API_KEY": KEY}


def codex(url: str, home: Path, model: str, prompt: str, timeout: float) -> Run:
    """Codex's run; `output` is its last message."""
    done = run(*codex_launch(url, home, model, prompt), home=home, timeout=timeout)
    last = home / "last.txt"
    done.output = last.read_text() if last.exists() else ""
    return done


def opencode(url: str, home: Path, model: str, prompt: str, timeout: float) -> Run:
    """opencode's run mode with an OpenAI-compatible provider; bash allowed, as a user
    allows it once."""
    config = {
        "provider": {"coderai": {
            "npm": "@ai-sdk/openai-compatible", "name": "CoderAI",
            "options": {"baseURL": f"{url}/v1", "apiKey": "{env:CODERAI_API_KEY}"},
            "models": {model: {"name": model}}}},
        "model": f"coderai/{model}",
        "permission": {"bash": "allow"},
    }  # fmt: skip
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opencode.json").write_text(json.dumps(config))
    argv = [str(BIN / "opencode"), "run", prompt]
    return run(argv, {"CODERAI_API_KEY": KEY}, home=home, timeout=timeout)


def aider(
    url: str, home: Path, model: str, prompt: str, timeout: float, context: int,
    files: list[str] | None = None,
) -> Run:  # fmt: skip
    """aider with one message, and `files` (in home/work) added to its chat to edit; it is
    told the model's context in a metadata file, as it asks for a model it does not know
    (it would warn, and try to fetch a price list)."""
    meta = home / "models.json"
    meta.write_text(json.dumps({f"openai/{model}": {
        "max_input_tokens": context, "max_output_tokens": 1024, "max_tokens": context,
        "input_cost_per_token": 0, "output_cost_per_token": 0,
        "litellm_provider": "openai", "mode": "chat"}}))  # fmt: skip
    argv = [str(AIDER), "--model", f"openai/{model}", "--model-metadata-file", str(meta),
            "--message", prompt, "--yes-always", "--no-git", "--no-check-update",
            "--analytics-disable", "--no-show-release-notes", "--no-pretty",
            *(files or [])]  # fmt: skip
    env = {"OPENAI_API_BASE": f"{url}/v1", "OPENAI_API_KEY": KEY}
    return run(argv, env, home=home, timeout=timeout)
