"""What each coding agent needs to run against a CoderAI server: its environment, the
configuration files it reads (written into a folder CoderAI owns, never over the user's
own), the arguments it is started with, the context its own prompt needs, and the same
settings written out for a user who sets them by hand (`coderai launch --print`).

Pure: `coderai launch` (launch.py) finds the server, the model and a key, writes the
files and starts the agent.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the agents `coderai launch` starts, and the command each is installed as
AGENTS = {"claude": "claude", "codex": "codex", "opencode": "opencode", "aider": "aider"}
#: how to install one that is missing
INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
    "opencode": "npm install -g opencode-ai",
    "aider": "pip install aider-chat",
}
#: the context each agent's own prompt needs, in tokens (measured: Claude Code's is ~21k
#: with its 23 tools, Codex's and opencode's 6-8k, aider's under 1k), with room to work
NEEDS = {"claude": 32768, "codex": 16384, "opencode": 16384, "aider": 8192}


@dataclass
class Plan:
    """How an agent is started: its argv after the command, its environment (added to
    the user's, less `unset`), and the files it reads (path -> text)."""

    args: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)
    #: variables of the user's own that would send it elsewhere, or a second key
    unset: tuple[str, ...] = ()

    def manual(self, command: str) -> str:
        """The same settings for a user who sets them by hand."""
        lines = [f"# {path} (written)" for path in self.files]
        lines += [f"unset {name}" for name in self.unset]
        lines += [f"export {name}={shlex.quote(value)}" for name, value in self.env.items()]
        lines.append(shlex.join([command, *self.args]))
        return "\n".join(lines)


#: a user's own variables that would send Claude Code elsewhere, or with a second key
CLAUDE_UNSET = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")


def output_limit(context: int) -> int:
    """The answer's length an agent is told to allow for: an eighth of the window, from
    1,024 to 8,192 tokens. Agents keep it free of their prompt (opencode compacts when the
    prompt passes the window less it), so it must leave the prompt most of the window."""
    return min(8192, max(1024, context // 8))


def compact_at(context: int) -> int:
    """Where an agent that takes a threshold compacts: at 80% of the window, leaving room
    for the next turn's tool output and the summary's own request."""
    return context * 4 // 5


def _toml(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string


def plan(agent: str, url: str, key: str, model: str, folder: Path, context: int) -> Plan:
    """The plan for `agent` against the server at `url`, with `model` for every tier,
    `key` as its API key and `folder` for its files; `context` is the model's (0: not
    known, and not told)."""
    if agent == "claude":
        return Plan([], {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_AUTH_TOKEN": key,
            # every tier is the one model: Claude Code asks for a small one on its own
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
            # its per-request billing nonce leads the system prompt: off, so that every
            # turn's prompt can be the last one's prefix (the server strips it anyway)
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # a model it does not know is taken to have a window of 1,000,000 tokens and
            # a 32,000-token answer, so it would never compact: the model's own, and the
            # window it compacts within
            **({"CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(context),
                "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(context),
                "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output_limit(context))} if context else {}),
        }, unset=CLAUDE_UNSET)  # fmt: skip
    if agent == "codex":
        # the user's own Codex home (its MCP servers, history, trust) stays: the provider
        # and the model are given as overrides
        provider = (
            f"{{name={_toml('CoderAI')}, base_url={_toml(url + '/v1')}, "
            f"env_key={_toml('CODERAI_API_KEY')}, wire_api={_toml('responses')}}}"
        )
        args = ["-c", f"model={_toml(model)}", "-c", "model_provider=\"coderai\"",
                "-c", f"model_providers.coderai={provider}"]  # fmt: skip
        if context:
            args += ["-c", f"model_context_window={context}",
                     "-c", f"model_auto_compact_token_limit={compact_at(context)}"]  # fmt: skip
        return Plan(args, {"CODERAI_API_KEY": key})
    if agent == "opencode":
        limits = {"limit": {"context": context, "output": output_limit(context)}} if context else {}
        settings: dict[str, Any] = {
            "provider": {"coderai": {
                "npm": "@ai-sdk/openai-compatible", "name": "CoderAI",
                "options": {"baseURL": f"{url}/v1", "apiKey": "{env:CODERAI_API_KEY}"},
                "models": {model: {"name": model, **limits}}}},
            "model": f"coderai/{model}",
        }  # fmt: skip
        # given whole, over the user's global config and a project's own
        return Plan([], {"OPENCODE_CONFIG_CONTENT": json.dumps(settings),
                         "CODERAI_API_KEY": key})  # fmt: skip
    if agent == "aider":
        args = ["--model", f"openai/{model}", "--no-show-model-warnings"]
        files: dict[Path, str] = {}
        if context:  # aider asks a price list for a model it does not know: told here
            meta = {
                f"openai/{model}": {
                    "max_input_tokens": context,
                    "max_output_tokens": output_limit(context),
                    "max_tokens": context,
                    "input_cost_per_token": 0,
                    "output_cost_per_token": 0,
                    "litellm_provider": "openai",
                    "mode": "chat",
                }
            }
            path = folder / "aider" / "models.json"
            files[path] = json.dumps(meta, indent=2) + "\n"
            args[2:2] = ["--model-metadata-file", str(path)]
        env = {"OPENAI_API_BASE": f"{url}/v1", "OPENAI_API_KEY": key}
        return Plan(args, env, files)
    raise ValueError(f"no agent {agent!r}: one of {', '.join(AGENTS)}")


def context_warning(agent: str, model: str, context: int) -> str | None:
    """What to tell a user whose model's context is too small for the agent, and how to
    fix it; None when it fits."""
    need = NEEDS[agent]
    if context >= need:
        return None
    return (
        f"{model}'s context is {context} tokens; {agent} needs about {need} (its own prompt "
        f"and room to work). Give the model a larger one: its catalogue entry's option "
        f'"n_ctx": {need} (models.json, or the console\'s Models page), if the model takes it.'
    )
