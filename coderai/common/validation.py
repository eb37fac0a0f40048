"""Pydantic at the edges, for config files and HTTP bodies: a model that refuses keys it does
not name, and one way to tell a person what pydantic found wrong."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError


class Strict(BaseModel):
    """A key the model does not name is refused, never ignored: a misspelt one would
    otherwise do nothing."""

    model_config = ConfigDict(extra="forbid")


def _keep_alive(seconds: float) -> float:
    if not math.isfinite(seconds) or (seconds < 0 and seconds != -1):
        raise ValueError("keep_alive is seconds idle before an unload, or -1 for never")
    return seconds


#: seconds a model may stay idle before it is unloaded (front/dispatch/idle.py); -1: never
KeepAlive = Annotated[float, AfterValidator(_keep_alive)]


def first_problem(exc: ValidationError) -> tuple[list[str], str]:
    """(where, what) of the error a person can act on first: the dotted path to the value
    and the message. Of the errors listed for a union (one per branch), a failed check of
    ours says more than "not a string" from another branch."""
    errors = exc.errors()
    chosen: Any = next((e for e in errors if e["type"] == "value_error"), errors[0])
    # a union's branch names ("function-after[...]", "list[...]") are noise to a person
    where = [str(p) for p in chosen["loc"] if not _is_branch(p)]
    if chosen["type"] == "extra_forbidden":
        return where, "unknown key (check its spelling)"
    return where, str(chosen["msg"]).removeprefix("Value error, ")


def _is_branch(part: object) -> bool:
    return isinstance(part, str) and ("[" in part or "(" in part)


def file_problem(path: Path, exc: ValidationError) -> str:
    """What is wrong in a file, as a ConfigError says it: `path: where: what`."""
    where, message = first_problem(exc)
    return f"{path}: {'.'.join(where) or '(top level)'}: {message}"
