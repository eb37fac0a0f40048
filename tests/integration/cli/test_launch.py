"""`coderai launch`: each real coding agent (installed by tests/agents/install.sh) started by
it against a running server answers one non-interactive question end to end; `--print`
shows the settings; a model whose context is too small for the agent is warned about
with the fix; a server that wants API keys gets one made for the agent; a missing agent
is named with how to install it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import agents
from tests.support.server import Server

ANSWER = "Paris is the capital of France."
QUESTION = "What is the capital of France?"
#: the agents' own non-interactive way to ask one question
ASK = {
    "claude": ["-p", QUESTION, "--output-format", "json"],
    "codex": ["exec", "--skip-git-repo-check", QUESTION],
    "opencode": ["run", QUESTION],
    "aider": ["--message", QUESTION, "--yes-always", "--no-git", "--no-check-update",
              "--analytics-disable", "--no-show-release-notes", "--no-pretty"],
}  # fmt: skip


# -- a session that outgrows the window ------------------------------------------------------
# A scripted model runs the agent's shell tool on a command whose output fills most of a
# small window (the fake model counts words), then answers; asked for a summary in the
# agent's own words (its compaction prompt), it writes one; a conversation that resumes
# from the agent's own summary prefix gets AFTER. The window is the agent's prompt and
# a little more, measured here: the agent compacts on the window `coderai launch` told it.

#: per agent: its shell tool and arguments, the model's window, a phrase of the agent's
#: compaction prompt, and one of what it puts before the summary it resumes from
LONG = {
    "claude": ("Bash", {"command": "seq 1 3000"}, 12000,
               "detailed summary of the conversation", "continued from a previous conversation"),
    "codex": ("exec_command", {"cmd": "seq 1 2000"}, 6000,
              "CONTEXT CHECKPOINT COMPACTION", "produced a summary"),
    "opencode": ("bash", {"command": "seq 1 3000", "description": "Count"}, 4000,
                 "summary", "Continue if you have next steps"),
    # aider runs no tools: its long answer fills the history it keeps within a budget
    "aider": ("", {}, 8192, "summarize this partial conversation", "I spoke to you previously"),
}  # fmt: skip
AFTER = "Going on from the summary."


def _long_session(agent: str) -> dict[str, Any]:
    tool, arguments, context, asks, resumes = LONG[agent]
    call = f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"
    if not tool:
        call = " ".join(f"line{i}" for i in range(1500))
    rules = [[asks, "SUMMARY: the user asked to count; the command printed the numbers."],
             [resumes, AFTER]]  # fmt: skip
    return {"id": f"long-{agent}", "format": "fake", "options": {
        "script": [call, "The tool said it."], "script_rules": rules, "script_token_chars": 64,
        "context": context}}  # fmt: skip


def _server(folder: Path, require_key: bool) -> Server:
    models = [
        {
            "id": "answer",
            "alias": "ans",
            "format": "fake",
            "options": {"script": ANSWER, "context": 65536},
        },
        {"id": "small", "format": "fake", "options": {"script": ANSWER, "context": 4096}},
        *(_long_session(agent) for agent in LONG),
    ]
    auth = {"admin_key": "test-admin-key", "require_api_key": require_key}
    srv = Server(folder, {"engines": 1}, models, extra_config={"auth": auth})
    srv.wait_ready(1)
    return srv


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = _server(tmp_path_factory.mktemp("launch"), require_key=False)
    try:
        yield srv
    finally:
        srv.stop()


def launch(
    srv: Server,
    home: Path,
    *argv: str,
    path: str | None = None,
    config: bool = True,
    before: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """`coderai launch` as a user runs it: the agents on PATH, its own HOME, in a project
    folder of its own; the server's config, or (`config` false) `--url` alone."""
    node = shutil.which("node")
    bins = [str(agents.BIN), str(agents.AIDER.parent), str(Path(node).parent) if node else ""]
    env = {
        "PATH": path if path is not None else os.pathsep.join([*bins, "/usr/bin", "/bin"]),
        "HOME": str(home),
    }
    project = home / "project"
    project.mkdir(parents=True, exist_ok=True)
    where = ["--config", str(srv.workdir / "config.json")] if config else ["--url", srv.url]
    command = [sys.executable, "-m", "coderai", *before, "launch", argv[0], *where, *argv[1:]]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip


@pytest.mark.parametrize("agent", sorted(ASK))
def test_each_agent_answers_a_question_through_coderai_launch(
    server: Server, tmp_path: Path, agent: str
) -> None:
    done = launch(server, tmp_path, agent, "--model", "answer", "--", *ASK[agent])
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert ANSWER in done.stdout, f"{done.stdout}\n{done.stderr}"
    assert "coderai: warning" not in done.stderr  # the model fits every agent


def test_print_shows_the_settings_and_starts_nothing(server: Server, tmp_path: Path) -> None:
    done = launch(server, tmp_path, "claude", "--model", "answer", "--print")
    assert done.returncode == 0, done.stderr
    assert f"export ANTHROPIC_BASE_URL=http://127.0.0.1:{server.port}" in done.stdout
    assert "export CLAUDE_CODE_ATTRIBUTION_HEADER=0" in done.stdout
    assert "export ANTHROPIC_DEFAULT_HAIKU_MODEL=answer" in done.stdout
    codex = launch(server, tmp_path, "codex", "--print")  # the first model listed
    assert "model_provider" in codex.stdout and '"answer"' in codex.stdout
    assert "CODEX_HOME" not in codex.stdout  # the user's own Codex home stays theirs
    # an alias names its model; after a global option, -- still starts the agent's own
    alias = launch(server, tmp_path, "aider", "--model", "ans", "--print", "--", "--message",
                   "hi", before=("--log-level", "WARNING"))  # fmt: skip
    assert alias.returncode == 0, alias.stderr
    assert alias.stdout.splitlines()[-1].endswith("--message hi"), alias.stdout


def test_without_a_config_the_files_go_in_the_users_state_not_the_project(
    server: Server, tmp_path: Path
) -> None:
    done = launch(server, tmp_path, "aider", "--model", "answer", "--print", config=False)
    assert done.returncode == 0, done.stderr
    written = tmp_path / ".local/state/coderai/launch/aider/models.json"
    assert json.loads(written.read_text())["openai/answer"]["max_input_tokens"] == 65536
    assert f"--model-metadata-file {written}" in done.stdout  # printed as written
    assert list((tmp_path / "project").iterdir()) == []


def test_a_model_too_small_for_the_agent_is_warned_about_with_the_fix(
    server: Server, tmp_path: Path
) -> None:
    done = launch(server, tmp_path, "claude", "--model", "small", "--print")
    assert done.returncode == 0, done.stderr
    assert "small's context is 4096 tokens; claude needs about 32768" in done.stderr
    assert '"n_ctx": 32768' in done.stderr
    unknown = launch(server, tmp_path, "claude", "--model", "nope", "--print")
    assert unknown.returncode == 2 and "has no model 'nope'" in unknown.stderr


def test_a_missing_agent_is_named_with_how_to_install_it(server: Server, tmp_path: Path) -> None:
    done = launch(server, tmp_path, "codex", "--model", "answer", path="/usr/bin:/bin")
    assert done.returncode == 2
    assert "codex is not installed: npm install -g @openai/codex" in done.stderr


def test_a_server_that_wants_keys_gets_one_made_for_the_agent(tmp_path: Path) -> None:
    srv = _server(tmp_path / "server", require_key=True)
    try:
        done = launch(srv, tmp_path / "home", "claude", "--model", "answer", "--print")
        assert done.returncode == 0, done.stderr
        assert "made API key" in done.stderr
        token = next(line.split("=", 1)[1] for line in done.stdout.splitlines()
                     if line.startswith("export ANTHROPIC_AUTH_TOKEN="))  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"}
        listed = httpx.get(f"{srv.url}/v1/models", headers=headers, timeout=30)
        assert listed.status_code == 200 and "answer" in json.dumps(listed.json())
        assert httpx.get(f"{srv.url}/v1/models", timeout=30).status_code == 401
    finally:
        srv.stop()


def test_claude_code_compacts_a_session_that_outgrows_the_window_and_goes_on(
    server: Server, tmp_path: Path
) -> None:
    """Turn 1 runs the tool and answers (the window is nearly full); turn 2, resumed with
    --continue, is past the window Claude Code was told: it compacts first, and answers
    from its summary."""
    turn = ["--output-format", "json", "--allowedTools", "Bash"]
    first = launch(server, tmp_path, "claude", "--model", "long-claude", "--",
                   "-p", "Count to 3000", *turn)  # fmt: skip
    assert json.loads(first.stdout)["result"] == "The tool said it.", first.stderr
    second = launch(server, tmp_path, "claude", "--model", "long-claude", "--",
                    "-p", "Go on", "--continue", *turn)  # fmt: skip
    assert json.loads(second.stdout)["result"] == AFTER, second.stdout + second.stderr


def test_codex_compacts_a_session_that_outgrows_the_window_and_goes_on(
    server: Server, tmp_path: Path
) -> None:
    """The tool's output takes the conversation past the threshold `coderai launch` set
    (80% of the window) in the first turn: Codex compacts in the middle of it and answers
    from its summary; the next turn, resumed, is answered the same way."""
    run = ["exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    for prompt in (["Count to 2000"], ["resume", "--last", "Go on"]):
        done = launch(server, tmp_path, "codex", "--model", "long-codex", "--", *run, *prompt)
        assert done.returncode == 0, done.stdout + done.stderr
        items = [json.loads(line).get("item", {}) for line in done.stdout.splitlines()
                 if line.startswith("{")]  # fmt: skip
        said = [i["text"] for i in items if i.get("type") == "agent_message"]
        assert said == [AFTER], done.stdout


def test_opencode_compacts_a_session_that_outgrows_the_window_and_goes_on(
    server: Server, tmp_path: Path
) -> None:
    """opencode compacts once the prompt passes the window less the answer's limit that
    `coderai launch` set, and goes on with its own "Continue" message, in the same run."""
    settings = tmp_path / ".config" / "opencode" / "opencode.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"permission": {"bash": "allow"}}))  # the user's own "yes"
    done = launch(server, tmp_path, "opencode", "--model", "long-opencode", "--",
                  "run", "Count to 3000")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert AFTER in done.stdout, done.stdout[-2000:] + done.stderr


def test_aider_summarises_a_history_that_outgrows_its_budget_and_goes_on(
    server: Server, tmp_path: Path
) -> None:
    """aider keeps its chat history within a budget of the window `coderai launch` told
    it (a sixteenth, at least 1,024 tokens): the second run restores the first's long
    answer, has the model summarise it, and asks on from the summary."""
    flags = ["--yes-always", "--no-git", "--no-check-update", "--analytics-disable",
             "--no-show-release-notes", "--no-pretty", "--restore-chat-history"]  # fmt: skip
    first = launch(server, tmp_path, "aider", "--model", "long-aider", "--",
                   "--message", "Count", *flags)  # fmt: skip
    assert first.returncode == 0 and "line1499" in first.stdout, first.stdout + first.stderr
    second = launch(server, tmp_path, "aider", "--model", "long-aider", "--",
                    "--message", "Go on", *flags)  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    assert AFTER in second.stdout, second.stdout[-2000:] + second.stderr
