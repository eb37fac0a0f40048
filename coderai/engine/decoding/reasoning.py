"""A reasoning model's thinking out of its text, as it streams.

Reasoning models (Qwen3, DeepSeek-R1, GLM, and the many that copy them) write their thinking
first, between `<think>` and `</think>`, then the answer. The client wants them apart: the
thinking as `reasoning_content` (chat completions), `thinking` blocks (Messages) or
`reasoning` items (Responses), the answer as content, and a tool call written while
thinking is no call (the tool-call parser reads the answer only).

Two ways in: the model writes `<think>` itself at the start of its output (Qwen3), or the
chat template opened it at the end of the prompt (DeepSeek-R1, and Qwen3 templates that
force thinking), so the output starts inside it (`opens_reasoning`). Only a leading block
is reasoning: an answer that mentions `<think>` later is content. Whitespace around
`<think>` and `</think>` is not part of either (nor a `<think>` the model writes where its
template already opened one). Text that may be the start of
a marker is held back until it is known not to be one (as stop sequences are).
"""

from __future__ import annotations

from dataclasses import dataclass

from coderai.engine.decoding.marker import begun

#: the catalogue option `reasoning_format`'s values: `think` for <think>...</think>,
#: `harmony` for gpt-oss's analysis channel (read by harmony.py), `none` for a model whose
#: output is all answer
REASONING_FORMATS = ("think", "harmony", "none")
START, END = "<think>", "</think>"
_WHITESPACE = " \t\r\n"


#: the tags a reasoning model writes its thinking between (a family may have its own:
#: template_probe.py reads them from the template)
TAGS = (START, END)


def opens_reasoning(prompt: str, start: str = START) -> bool:
    """Whether a rendered prompt ends with `<think>` (its template opened the answer's
    reasoning): its output starts inside it. Only the end counts: a `<think>` in a
    message (a question about the tag, a file an agent read) opens nothing."""
    return prompt.rstrip(_WHITESPACE).endswith(start)


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""


class ReasoningSplitter:
    """Feed it the output's text in pieces; it says what is reasoning and what is answer."""

    def __init__(self, inside: bool = False, tags: tuple[str, str] = TAGS) -> None:
        self.start, self.end = tags
        #: "start" (nothing but whitespace yet), "inside" (reasoning), "after" (answer)
        self.state = "inside" if inside else "start"
        self._held = ""
        #: whitespace here begins the part and is dropped (after a marker)
        self._trim = inside

    @property
    def reasoning(self) -> bool:
        """Whether the text now being written is reasoning."""
        return self.state == "inside"

    def feed(self, text: str) -> Split:
        out = Split()
        data, self._held = self._held + text, ""
        if self.state == "start":
            head = data.lstrip(_WHITESPACE)
            if not head or (self.start.startswith(head) and len(head) < len(self.start)):
                self._held = data  # not yet known
                return out
            if not head.startswith(self.start):
                self.state = "after"
                out.content = data
                return out
            self.state, self._trim = "inside", True
            data = head[len(self.start) :]
        if self.state == "inside":
            if self._trim:
                data = data.lstrip(_WHITESPACE)
                # a model may write the <think> its template already opened
                if not data or (self.start.startswith(data) and len(data) < len(self.start)):
                    self._held = data
                    return out
                if data.startswith(self.start):
                    data = data[len(self.start) :].lstrip(_WHITESPACE)
                    if not data:
                        return out
                self._trim = False
            at = data.find(self.end)
            if at < 0:
                # held: what may grow into </think>, and the whitespace before it (the
                # reasoning's own end is not part of it)
                keep = begun(data, self.end)
                body = data[: len(data) - keep].rstrip(_WHITESPACE)
                out.reasoning = body
                self._held = data[len(body) :]
                return out
            out.reasoning = data[:at].rstrip(_WHITESPACE)
            self.state, self._trim = "after", True
            data = data[at + len(self.end) :]
        if self._trim:
            data = data.lstrip(_WHITESPACE)
            if not data:
                return out
            self._trim = False
        out.content += data
        return out

    def finish(self) -> Split:
        """The end of the output: held text is what it was being read as."""
        held, self._held = self._held, ""
        if self.state == "inside":
            return Split(reasoning=held)
        return Split(content=held)
