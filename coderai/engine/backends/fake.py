"""A deterministic model for tests and dispatcher benchmarks: no weights, no maths.

Its text is a pure function of (prompt, seed), so a test can compute exactly what a stream
must deliver. Options simulate speed, load time and faults:
tokens_per_second (0 = as fast as possible), load_seconds, output_tokens (natural length),
context (tokens prompt and completion share, like a real model's context window),
capacity (sequences one instance runs at once, like a llama.cpp context), memory_mb (the
memory it really takes once loaded, every page touched, so memory guards are tested
against real RSS), fail_after_tokens, crash_after_tokens (the process exits),
hang_after_tokens (the process stops responding), token_chars (each word repeated to
exactly this many characters: a stream carries bytes many times faster, for tests of
buffers and back-pressure), prompt_tokens_per_step (the prompt is read over several steps,
as a long one is: its progress is reported), script (a text it writes instead of
its words, in tokens of script_token_chars characters: tool-call parsing is tested through
the whole stack with it; a list of texts scripts a tool loop, turn by turn: `scripted`),
script_rules ([needle, text] pairs: a conversation whose user messages hold the needle
gets the text)
tool_format (the call format it is parsed as) and reasoning_format (how its reasoning
is split from its answer: a script may think in <think> tags). With
embedding_dims it embeds: each input's vector is a hash of its bytes (fake_embedding).

Its vocabulary is the 256 byte values: /tokenize gives a text's UTF-8 bytes, /detokenize
reads ids as bytes, and a token-id prompt reads as the text of its bytes (an id past 255
is refused, as a real model refuses one past its vocabulary). It has fill-in-the-middle:
with a suffix, its prompt is FIM_PROMPT filled with the prompt and the suffix.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import signal
import time
from typing import Any

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import (
    END,
    READING,
    Backend,
    EmbeddingInputs,
    LoadProgress,
    ModelInstance,
    Sequence,
    StepResult,
    as_prompt_job,
    check_input_lengths,
    fit_prompt,
    input_ids,
    known_ids,
)
from coderai.engine.decoding.chat_template import reasoning_format, tool_format
from coderai.errors import JobError

# a few non-ASCII words and JSON metacharacters keep the escaping paths honest
WORDS = (
    " the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ",", ".",
    " café", " naïve", " 東京", " \"quoted\"", " back\\slash", "\n", " tab\t", " model",
    " engine", " front", " bus", " token", " stream", " ✓", " data", " zero", " queue",
    " slot", " credit", " relay", " step",
)  # fmt: skip

DEFAULT_OUTPUT_TOKENS = 64
#: the fake weights are touched in pieces this large (see FakeInstance)
_WEIGHT_PIECE = 8 << 20
#: the fake model's vocabulary: one token per byte value
VOCABULARY = 256
#: the fake model's fill-in-the-middle prompt, in prefix-suffix-middle order
FIM_PROMPT = "<PRE>{prompt}<SUF>{suffix}<MID>"


def render_chat(messages: list[Any], add_generation_prompt: bool = True) -> str:
    """The fake model's chat template."""
    turns = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
    return turns + "<assistant>" if add_generation_prompt else turns


def job_prompt(job: Job) -> str:
    if job.kind == JobKind.CHAT:
        return render_chat(job.messages, job.add_generation_prompt)
    if job.prompt_ids:
        return bytes_text(job.prompt_ids, "prompt")
    if job.suffix:
        return FIM_PROMPT.format(prompt=job.prompt, suffix=job.suffix)
    return job.prompt


#: in a script, stands for the last tool result's text
TOOL_RESULT = "{tool_result}"
#: in a script, the last user message's text (its first 2,000 characters): what an agent
#: sent, echoed for a test to read
LAST_USER = "{last_user}"


def scripted(script: list[str], messages: list[Any], rules: list[list[str]] | None = None) -> str:
    """The scripted answer to a conversation: the text of the first rule [needle, text]
    whose needle a user message holds (a compaction's request for a summary, or the
    summary an agent goes on from), else script k after k tool results."""
    users = [str(m.get("content") or "") for m in messages
             if isinstance(m, dict) and m.get("role") == "user"]  # fmt: skip
    last_user = users[-1] if users else ""
    for needle, text in rules or []:
        if any(needle in said for said in users):
            return text
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    text = script[min(len(results), len(script) - 1)]
    last = str(results[-1].get("content") or "").strip() if results else ""
    return text.replace(TOOL_RESULT, last).replace(LAST_USER, last_user.strip()[:2000])


def bytes_text(ids: list[int], where: str) -> str:
    """The fake model's text of token ids: their bytes, as UTF-8."""
    return bytes(known_ids(ids, VOCABULARY, where)).decode("utf-8", errors="replace")


def _start_state(prompt: str, seed: int) -> int:
    digest = hashlib.blake2b(f"{seed}\0{prompt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") | 1


def _next_state(x: int) -> int:
    # xorshift64: cheap and deterministic, enough to spread words
    x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 7
    x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
    return x


def fake_tokens(prompt: str, seed: int, count: int, token_chars: int = 0) -> list[str]:
    """The token texts the fake model produces for a prompt (before stops and limits)."""
    state = _start_state(prompt, seed)
    out = []
    for _ in range(count):
        state = _next_state(state)
        out.append(_word(state, token_chars))
    return out


def fake_embedding(ids: list[int], dims: int) -> list[float]:
    """The fake model's embedding of some token ids: `dims` components drawn from a hash
    of the ids, scaled to unit length as embedding models' vectors usually are."""
    digest = hashlib.shake_256(bytes(ids)).digest(dims)
    raw = [b - 127.5 for b in digest]
    norm = math.sqrt(sum(x * x for x in raw))
    return [x / norm for x in raw]


def _word(state: int, chars: int) -> str:
    word = WORDS[state % len(WORDS)]
    return word if not chars else (word * (chars // len(word) + 1))[:chars]


def _option(options: dict[str, Any], name: str, default: float) -> float:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise JobError(f"fake model option {name} must be a number >= 0", kind="bad_model")
    return float(value)


class FakeInstance(ModelInstance):
    def __init__(self, options: dict[str, Any]) -> None:
        tps = _option(options, "tokens_per_second", 0)
        self.step_interval = 1.0 / tps if tps else 0.0
        self.output_tokens = int(_option(options, "output_tokens", DEFAULT_OUTPUT_TOKENS))
        self.context = int(_option(options, "context", 1 << 30))
        self.token_chars = int(_option(options, "token_chars", 0))
        self.capacity = int(_option(options, "capacity", 1 << 30)) or 1
        #: prompt tokens read per step, as a real model reads a long prompt in chunks (its
        #: steps paced by tokens_per_second); 0: the prompt is read as the job starts
        self.read_per_step = int(_option(options, "prompt_tokens_per_step", 0))
        self.fail_after = options.get("fail_after_tokens")
        self.crash_after = options.get("crash_after_tokens")
        self.hang_after = options.get("hang_after_tokens")
        # a scripted answer, for tool-call parsing through the whole stack: the model
        # writes `script` in tokens of `script_token_chars` characters, then ends. A list
        # scripts a tool loop: turn k (the conversation holds k tool results) writes
        # script k (the last one past the end), with TOOL_RESULT in it standing for the
        # last tool result's text, so an agent's test sees its tool's output come back
        script = options.get("script")
        if isinstance(script, str):
            script = [script]
        if script is not None and not (
            isinstance(script, list) and script and all(isinstance(s, str) for s in script)
        ):
            raise JobError(
                "fake model option script must be a string or a list of strings", kind="bad_model"
            )
        self.script: list[str] | None = script
        # [needle, text] pairs tried before the script (scripted)
        rules = options.get("script_rules", [])
        if not (isinstance(rules, list) and all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r)
            for r in rules
        )):  # fmt: skip
            raise JobError(
                "fake model option script_rules must be a list of [needle, text] pairs",
                kind="bad_model",
            )
        self.rules: list[list[str]] = rules
        self.script_chars = int(_option(options, "script_token_chars", 3)) or 1
        self.tool_format = tool_format(None, options)
        self.reasoning_format = reasoning_format(None, options)
        # its calls are parsed in tool_format: it calls tools as a template-trained model
        self.window, self.native_tools = (self.context if self.context < 1 << 30 else 0), True
        self.embedding_dims = int(_option(options, "embedding_dims", 0))
        # weights that are really there: mapped and every page written, so the process's
        # RSS grows by them (a zero-filled allocation would stay virtual). One anonymous
        # mapping, so that unloading gives it back to the OS at once (heap memory may stay
        # with the process); touched in pieces: touching 300 MiB in one call holds the GIL
        # for its whole length (over a second on a busy machine), starving the engine's
        # heartbeat, which a real load (torch, llama.cpp: file reads in C) does not
        weight_bytes = int(_option(options, "memory_mb", 0) * (1 << 20))
        self.weights: mmap.mmap | None = None
        if weight_bytes:
            weights = self.weights = mmap.mmap(-1, weight_bytes)
            for start in range(0, weight_bytes, _WEIGHT_PIECE):
                end = min(start + _WEIGHT_PIECE, weight_bytes)
                weights[start:end:4096] = b"\x01" * len(range(start, end, 4096))

    def start(self, seq: Sequence) -> None:
        if seq.job.logprobs:
            raise JobError("the fake model has no log-probabilities", kind="unsupported")
        prompt = job_prompt(seq.job)
        fit_prompt(seq, max(1, len(prompt.split())), self.context)
        seq.state = _start_state(prompt, seq.job.seed or 0)
        if self.script is not None:
            text = scripted(self.script, seq.job.messages, self.rules)
            seq.state = [
                text[i : i + self.script_chars] for i in range(0, len(text), self.script_chars)
            ]

    def tokenize(self, job: Job) -> tuple[list[int], int]:
        return list(job_prompt(as_prompt_job(job)).encode()), self.context

    def detokenize(self, ids: list[int]) -> str:
        return bytes_text(ids, "tokens")

    def marker_ids(self, text: str) -> list[int]:
        return list(text.encode())

    def embed(self, inputs: EmbeddingInputs) -> tuple[list[list[float]], int]:
        """With embedding_dims set: a unit vector per input, a pure function of its tokens
        (the bytes of a text), so that a test or the soak can check what it got."""
        if not self.embedding_dims:
            return super().embed(inputs)
        ids = input_ids(inputs, VOCABULARY, lambda text: list(text.encode()))
        check_input_lengths([len(i) for i in ids], self.context)
        return [fake_embedding(i, self.embedding_dims) for i in ids], sum(map(len, ids))

    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        out: list[StepResult] = []
        for seq in seqs:
            if self.read_per_step and seq.read < seq.prompt_tokens:
                seq.read = min(seq.prompt_tokens, seq.read + self.read_per_step)
                out.append(READING)
                continue
            n = seq.completion_tokens
            if n == self.crash_after:
                os._exit(17)
            if n == self.hang_after:
                os.kill(os.getpid(), signal.SIGSTOP)
            if n == self.fail_after:
                out.append(JobError(f"fake model failed after {n} tokens", kind="model_error"))
                continue
            if seq.forced:  # a forced marker: one token of its own, then the script goes on
                piece = bytes(seq.forced).decode("utf-8", errors="replace")
                seq.forced.clear()
                if self.script is not None:
                    seq.state.insert(n, piece)
                else:
                    out.append(piece)
                    continue
            if self.script is not None:
                out.append(seq.state[n] if n < len(seq.state) else END)
                continue
            if n >= self.output_tokens:
                out.append(END)
                continue
            seq.state = _next_state(seq.state)
            out.append(_word(seq.state, self.token_chars))
        return out


class FakeBackend(Backend):
    def load(self, spec: ModelSpec, progress: LoadProgress) -> ModelInstance:
        options = spec.options
        instance = FakeInstance(options)
        load_seconds = _option(options, "load_seconds", 0)
        deadline = time.monotonic() + load_seconds
        while (left := deadline - time.monotonic()) > 0:
            progress.fraction = 1.0 - left / load_seconds
            time.sleep(min(left, 0.05))
        progress.fraction = 1.0
        return instance
