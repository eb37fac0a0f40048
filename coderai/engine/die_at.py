"""The test seam for deaths: `CODERAI_DIE_AT` makes the llama.cpp probe child, or an engine
at a chosen phase, kill itself with a signal, so that every path a real crash takes (the
probe's verdict, the healing restart, the client's error, the console's last exit) is
exercised on any machine.

Its value is rules separated by commas, each `PHASE:SIGNAL[:repack]`:
- PHASE: `probe` (the probe child, as it reads its batch), `load` (an engine as it loads a
  model), `prompt` (an engine about to read a prompt), `generate` (an engine about to
  decode a token);
- SIGNAL: a name (`SIGILL`, `SIGBUS`, `SIGSEGV`, …) or a number;
- `repack`: only where llama.cpp's CPU extra buffer types are on for the model (as the AMX
  trap of some Xeon VMs is), so a restart with them off lives.

The process kills itself with the real signal: what the front and the probe's parent see
is what a real SIGILL shows them.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

VARIABLE = "CODERAI_DIE_AT"
PHASES = frozenset({"probe", "load", "prompt", "generate"})


@dataclass(frozen=True)
class Rule:
    phase: str
    signal: signal.Signals
    #: only where the extra buffer types are on
    repack: bool = False


def parse(text: str) -> tuple[Rule, ...]:
    """The rules of a CODERAI_DIE_AT value; ValueError names a malformed one."""
    rules = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        fields = part.split(":")
        if len(fields) not in (2, 3) or fields[0] not in PHASES:
            raise ValueError(f"{VARIABLE}: {part!r} is not PHASE:SIGNAL[:repack] with PHASE"
                             f" one of {', '.join(sorted(PHASES))}")  # fmt: skip
        if len(fields) == 3 and fields[2] != "repack":
            raise ValueError(f"{VARIABLE}: {part!r}: only 'repack' may follow the signal")
        rules.append(Rule(fields[0], signal_of(fields[1]), len(fields) == 3))
    return tuple(rules)


def signal_of(name: str) -> signal.Signals:
    name = name.strip().upper()
    try:
        return (
            signal.Signals(int(name))
            if name.isdigit()
            else signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        )
    except (KeyError, ValueError):
        raise ValueError(f"{VARIABLE}: {name!r} is not a signal") from None


#: read once per process: the seam is set when an engine starts, never changed after
RULES: tuple[Rule, ...] = parse(os.environ.get(VARIABLE, ""))


def due(rules: tuple[Rule, ...], phase: str, repack: bool) -> signal.Signals | None:
    """The signal a process at `phase` dies of under these rules, if any (pure)."""
    for rule in rules:
        if rule.phase == phase and (repack or not rule.repack):
            return rule.signal
    return None


def at(phase: str, repack: bool = False) -> None:
    """Die here if a rule says so. Callers on a hot path test RULES first."""
    sig = due(RULES, phase, repack)
    if sig is not None:
        # Python leaves these signals at their default action (faulthandler, where on,
        # prints the stacks and raises them again): the process ends by `sig`
        os.kill(os.getpid(), sig)
