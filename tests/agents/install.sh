#!/usr/bin/env bash
# The real coding agents that tests/integration/test_agents.py drives, installed as their
# users install them, into .agents/ (ignored by git): Claude Code, Codex CLI and opencode
# from npm, aider from PyPI into a venv of its own (its exact pins would fight ours).
# Versions are pinned so a run repeats; the newest at the time of writing. Safe to rerun.
# Without Node.js 18 or newer it says so and installs aider only: the suite still runs,
# and the npm agents' tests fail naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .agents
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if command -v npm >/dev/null && [ "$node_major" -ge 18 ]; then
  npm install --prefix .agents --no-package-lock --no-save --no-audit --no-fund \
    --loglevel=error --fetch-retries=4 \
    @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 opencode-ai@1.18.33
else
  echo "tests/agents/install.sh: Node.js >= 18 with npm is needed for Claude Code, Codex" \
    "CLI and opencode; their tests will fail" >&2
fi
[ -x .agents/aider/bin/pip ] || python3 -m venv .agents/aider
.agents/aider/bin/pip install -qq --retries 4 aider-chat==0.86.2
