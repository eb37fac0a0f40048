"""How an engine died, in words a client and an operator can act on: which engine, how it
ended ("died of SIGILL (illegal instruction)"), what it was doing (loading a model, reading
a prompt, generating), and for which model. The dispatcher keeps each engine's last death;
requests it ended, /healthz, the admin API and the console say it, and a request that no
engine can serve names the engine that could and why it is not running. Pure functions."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from coderai.front.engines.host import EngineStatus


@dataclass(frozen=True)
class Death:
    engine: str
    pid: int | None
    #: how it ended: "died of SIGILL (illegal instruction)", "stopped responding"
    how: str
    #: what it was doing: "loading model 'x'", "reading a prompt for model 'x'"
    doing: str
    capabilities: frozenset[str] = frozenset()
    at: float = field(default_factory=time.time)

    def sentence(self) -> str:
        return f"engine {self.engine} {self.how} while {self.doing}"

    def public(self) -> dict[str, object]:
        return {"engine": self.engine, "pid": self.pid, "how": self.how, "doing": self.doing,
                "at": self.at, "message": self.sentence()}  # fmt: skip


def job_doing(model: str, started: bool, prompt_tokens: int | None, loaded: bool) -> str:
    """What an engine was doing for one job when it died: generating once the first token
    came; reading its prompt once the engine admitted it (it counted the prompt) or where
    the model was loaded there; else loading the model."""
    if started:
        return f"generating for model {model!r}"
    if prompt_tokens is not None:
        return f"reading this prompt ({prompt_tokens:,} tokens) for model {model!r}"
    if loaded:
        return f"reading this prompt for model {model!r}"
    return f"loading model {model!r}"


def engine_doing(jobs: list[str], loading: list[str]) -> str:
    """What an engine was doing, from what it did for its jobs (job_doing's phrases, with
    "this prompt" made general) and the models it was loading."""
    if jobs:
        return jobs[0].replace("this prompt", "a prompt")
    if loading:
        return f"loading model {loading[0]!r}"
    return "idle (no request or load on it)"


def asked_to_load(
    asked: dict[str, float], loaded: list[str], loading: dict[str, float], now: float,
    interval: float,
) -> dict[str, float]:  # fmt: skip
    """The loads asked of an engine still unseen after a heartbeat: one its heartbeat shows
    loading or loaded is the heartbeat's to report, and one asked over two intervals ago
    and not shown was refused or failed (its engine has said so by now)."""
    return {
        model: at
        for model, at in asked.items()
        if model not in loaded and model not in loading and now - at < 2 * interval
    }


def down(deaths: list[Death], statuses: dict[str, EngineStatus], now: float) -> str:
    """Why engines that could serve are not running: their last deaths, with what the
    supervisor does about it (restarting, backing off, flapping)."""
    parts = []
    for death in deaths:
        status = statuses.get(death.engine)
        plan = ""
        if status is not None and status.state == "backoff" and status.retry_at is not None:
            plan = f"; next try in {max(0.0, status.retry_at - now):.0f} s"
        elif status is not None and status.state in ("restarting", "starting"):
            plan = "; it is being restarted"
        if status is not None and status.flapping:
            plan = f"; it failed {status.failures} times in a row at start{plan}"
        parts.append(f"{death.sentence()}{plan}")
    return "; ".join(parts)
