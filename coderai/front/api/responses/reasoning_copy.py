"""How a reasoning item is shown to a client, and the copy of its thinking that a client
asked for with `include: ["reasoning.encrypted_content"]`.

OpenAI encrypts a reasoning item's thinking so that a client that keeps no state on the
server (`store: false`, as Codex runs) can send it back without reading it. Nothing here
is stored and nothing is secret from the client (the thinking is in the item's text
already), so the copy is not encrypted: it is the thinking's text, base64-encoded under a
prefix of ours, so that a client which sends back only `encrypted_content` still gives the
model its thinking. A copy without our prefix (one OpenAI made) cannot be read: it is left
out, as is any summary.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

PREFIX = "coderai-reasoning-v1:"
#: a compaction item's summary (compaction.py), kept the same way
COMPACTION_PREFIX = "coderai-compaction-v1:"


@dataclass(frozen=True)
class Shown:
    """What a reasoning item carries besides its text: the thinking as its summary
    (`reasoning.summary` asked: a local model writes none of its own) and its copy
    (`include` asked)."""

    summary: bool = False
    copy: bool = False


#: the text alone
PLAIN = Shown()


def seal(text: str, prefix: str = PREFIX) -> str:
    return prefix + base64.b64encode(text.encode("utf-8")).decode("ascii")


def unseal(copy: str, prefix: str = PREFIX) -> str:
    """The text in a copy of ours (a thinking's, or under another prefix of ours a
    compaction's summary: compaction.py); "" for one that is not."""
    if not copy.startswith(prefix):
        return ""
    try:
        return base64.b64decode(copy[len(prefix) :], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ""
