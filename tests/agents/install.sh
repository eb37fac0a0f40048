#!/usr/bin/env bash
# The real coding agents that tests/integration/test_agents.py drives, installed as their
# users install them, into .agents/ (ignored by git): Claude Code, Codex CLI and opencode
# from npm, aider from PyPI into a venv of its own (its exact pins would fight ours).
# Versions are pinned so a run repeats; the newest at the time of writing. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .agents
npm install --prefix .agents --no-package-lock --no-save --no-audit --no-fund --loglevel=error \
  @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 opencode-ai@1.18.33
[ -x .agents/aider/bin/pip ] || python3 -m venv .agents/aider
.agents/aider/bin/pip install -qq aider-chat==0.86.2
