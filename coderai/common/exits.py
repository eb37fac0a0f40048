"""How a process ended, in words: the front's supervisor and the engine's trial of
llama.cpp's kernels both report exits to people, who read "died of SIGILL (illegal
instruction)" where the OS says -4."""

from __future__ import annotations

import signal


def signal_name(code: int | None) -> str | None:
    """The signal a process died of (asyncio's and subprocess's negative return codes),
    by name, or None for an exit of its own."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def exit_words(code: int | None) -> str:
    """An exit as a sentence's predicate: "died of SIGILL (illegal instruction)",
    "exited with code 3"."""
    if code is None:
        return "ended (how is not known)"
    name = signal_name(code)
    if name is None:
        return f"exited with code {code}"
    described = signal.strsignal(-code) if not name.startswith("signal ") else None
    return f"died of {name} ({described.lower()})" if described else f"died of {name}"
