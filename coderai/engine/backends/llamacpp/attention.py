"""Which attention kernel a model's context is made with on the CPU, flash attention or
not, chosen by timing both on this machine.

Why timed: neither kernel wins everywhere. On a 2-core AVX2 EPYC, SmolLM2 read a 512-token
chunk 3,584 deep as fast with either (4.65 against 4.61 s) and decoded a token there slower
with flash attention (33 against 27 ms); an Intel Xeon read prompts at 4k depth 1.5x faster
with it and decoded 3x slower (llama-bench). One context has one kernel: the V cache's
layout follows it, so the choice is made once, at load, for what an agent's turn does.

How: a child process builds a small model with the real one's attention (its heads,
key/value heads, head size and KV cache type; a narrow embedding, few layers, little
else), and times both kernels side by side: chunks read and one-token steps at depths up
to DEPTH. What differs between the kernels is attention alone, so their costs per token
and per cell, scaled by the real model's layers, say which kernel costs the turn less
(`choose`, pure). The costs are kept per machine and attention shape in the machine
folder (machine.py): measured once.

What the pass does not see: the cells of other sequences kept in the one KV cache, which
attention without flash computes and masks and flash attention skips (parking moves idle
ones to RAM: host_tier.py), and depths past DEPTH, priced by the line through those timed.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("coderai.engine")

#: the timed model's layers (the real model's attention cost is these scaled)
LAYERS = 4
#: its embedding and feed-forward widths and vocabulary: small, attention is what is timed
#: (its kernels see the heads and their size only)
WIDTH, FEED_FORWARD, VOCAB = 64, 64, 512
#: a chunk read, the depth timed deep, one-token steps timed at each depth
CHUNK, DEPTH, READS, STEPS = 512, 2048, 2, 9
#: the two kernels by name, and llama.cpp's flash_attn_type for each
FLASH_TYPES = (("off", 0), ("on", 1))
#: how long the pass may take before it counts as failed, and how long a failure is kept
#: (a busy machine may time out: the next load a day later tries again, not every load)
TIMEOUT_SECONDS, RETRY_SECONDS = 60.0, 86400.0
#: the file the child writes its timings to, in the folder it is given
TIMINGS = "timings.json"


@dataclass(frozen=True)
class Shape:
    """A model's attention, as far as the kernels care."""

    heads: int
    kv_heads: int
    head_size: int
    #: the KV cache's element type (ggml's type id)
    kv_type: int = 1

    @property
    def key(self) -> str:
        return f"h{self.heads}-kv{self.kv_heads}-d{self.head_size}-t{self.kv_type}"


@dataclass(frozen=True)
class Costs:
    """One kernel's attention costs for LAYERS layers, in seconds: a token read at depth 0
    and per cell of depth, a one-token step at depth 0 and per cell."""

    read: float
    read_cell: float
    step: float
    step_cell: float


@dataclass(frozen=True)
class Turn:
    """The work a choice is made for: an agent's turn reads `read` new tokens after
    `depth` kept ones and writes `written`."""

    depth: int
    read: int = 2048
    written: int = 256

    @classmethod
    def of(cls, n_ctx: int) -> Turn:
        """16,384 deep, or half the context where it is smaller."""
        return cls(depth=min(16384, n_ctx // 2))


@dataclass(frozen=True)
class Choice:
    flash: bool
    why: str
    #: the turn's seconds with each kernel: reading, writing
    off: tuple[float, float] = (0.0, 0.0)
    on: tuple[float, float] = (0.0, 0.0)


def fit(reads: list[tuple[int, float]], steps: list[tuple[int, float]]) -> Costs:
    """A kernel's costs from its timings (pure): (depth, seconds) of CHUNK-token reads and
    of one-token steps, a line through each by least squares. A slope that noise made
    negative counts as none, and a cost below 0 as 0."""
    read_slope, read_at0 = _line(reads)
    step_cell, step = _line(steps)
    read_cell = read_slope / CHUNK
    # a chunk's tokens see on average half the chunk besides the depth
    read = max(0.0, read_at0 / CHUNK - read_cell * CHUNK / 2)
    return Costs(read=read, read_cell=read_cell, step=max(0.0, step), step_cell=step_cell)


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through the points, its slope at
    least 0 (pure): a flat line through their mean where it would fall."""
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    covary = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = max(0.0, covary / spread)
    return slope, mean_y - slope * mean_x


def turn_seconds(costs: Costs, turn: Turn, layers: int) -> tuple[float, float]:
    """What a turn's attention costs a model of `layers` layers with these costs (pure):
    its reading and its writing."""
    scale = layers / LAYERS
    reading = turn.read * (costs.read + costs.read_cell * (turn.depth + turn.read / 2))
    seen = turn.depth + turn.read + turn.written / 2
    writing = turn.written * (costs.step + costs.step_cell * seen)
    return reading * scale, writing * scale


def choose(off: Costs, on: Costs, turn: Turn, layers: int) -> Choice:
    """The kernel that costs the turn less (pure); a tie keeps flash attention off, the
    kernel whose one-token steps are the simpler."""
    seconds_off, seconds_on = turn_seconds(off, turn, layers), turn_seconds(on, turn, layers)
    flash = sum(seconds_on) < sum(seconds_off)
    read, write = (seconds_on[i] - seconds_off[i] for i in range(2))
    why = (
        f"timed on this machine: an agent's turn ({turn.read:,} tokens read and"
        f" {turn.written:,} written, {turn.depth:,} deep) with flash attention reads"
        f" {_signed(read)} and writes {_signed(write)}"
    )
    return Choice(flash, why, off=seconds_off, on=seconds_on)


def _signed(seconds: float) -> str:
    return f"{abs(seconds):.1f} s {'faster' if seconds < 0 else 'slower'}"


def rule(
    option: object,
    *,
    on_gpu: bool,
    quantized: bool,
    windowed: bool,
    timeable: str | None = None,
) -> Choice | None:
    """The choice where nothing needs timing (pure); None where the pass decides.
    `timeable` says why a model's attention cannot be timed, where it cannot."""
    if option is not None:
        return Choice(bool(option), "the model entry says so (flash_attn)")
    if on_gpu:
        return Choice(True, "on a GPU, where it pays")
    if quantized:
        return Choice(True, "a quantized V cache needs it")
    if windowed:
        # measured on a 2-core AVX2 CPU, Gemma 3 270M: a cold prompt read at 321 against
        # 250 tok/s, 274 against 173 beside another kept prompt, decode steps no slower
        return Choice(True, "a windowed model: it skips the cells outside the window")
    if timeable is not None:
        return Choice(False, f"{timeable}: not timed; off, the CPU's default")
    return None


#: reads a measure kept under a key in the machine's file where it is there and fresh, or
#: takes it and keeps it (machine.MachineFiles.kept)
Kept = Callable[
    [str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], bool]], dict[str, Any]
]


def kernel_for(fixed: Choice | None, shape: Shape, layers: int, n_ctx: int, kept: Kept) -> Choice:
    """A model's kernel: `fixed` where the rule gives one, else the cheaper for a turn in
    its context, from the costs `kept` gives (timed where none are kept, or where the last
    pass failed over RETRY_SECONDS ago). Nothing here fails a load: a pass that fails
    leaves flash attention off, as the CPU's default."""
    if fixed is not None:
        return fixed

    def taken() -> dict[str, Any]:
        log.info("flash attention: timing both kernels for attention %s", shape.key)
        started = time.monotonic()
        try:
            costs = measure(shape)
        except RuntimeError as exc:
            log.warning("flash attention: %s; tried again in a day", exc)
            return {"failed": str(exc), "at": time.time()}
        log.info("flash attention: timed in %.1f s", time.monotonic() - started)
        return {kernel: asdict(c) for kernel, c in costs.items()}

    def fresh(value: dict[str, Any]) -> bool:
        at = value.get("at")
        return "failed" not in value or (
            isinstance(at, (int, float)) and time.time() - at < RETRY_SECONDS
        )

    try:
        costs = kept(shape.key, taken, fresh)
        if "failed" in costs:
            return Choice(False, f"the timed pass failed ({costs['failed']}): off, the"
                                 " CPU's default")  # fmt: skip
        off, on = (Costs(**{k: float(v) for k, v in costs[kernel].items()}) for kernel in
                   ("off", "on"))  # fmt: skip
        # the layers scale both kernels alike: they change the seconds, not the choice
        return choose(off, on, Turn.of(n_ctx), layers)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return Choice(False, f"the kept costs cannot be read ({exc!r}): off, the CPU's"
                             " default")  # fmt: skip


class Attention:
    """This process's kernel choices, one per model loaded, for the heartbeat (one
    instance: ATTENTION). The loader thread decides; the scheduler releases; the event
    loop reads the report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: each model's choice and its instances, by model id
        self._chosen: dict[str, tuple[Choice, int]] = {}

    def loaded(self, model_id: str, chosen: Choice) -> None:
        """An instance of a model was made with this kernel: in the report until it
        goes."""
        with self._lock:
            _, instances = self._chosen.get(model_id, (chosen, 0))
            self._chosen[model_id] = (chosen, instances + 1)

    def released(self, model_id: str) -> None:
        with self._lock:
            choice, instances = self._chosen.get(model_id, (None, 0))
            if choice is None:
                return
            if instances > 1:
                self._chosen[model_id] = (choice, instances - 1)
            else:
                del self._chosen[model_id]

    def report(self) -> dict[str, Any]:
        """Each loaded model's kernel, for the heartbeat: {"models": {id: {on, why}}}."""
        with self._lock:
            chosen = {m: {"on": c.flash, "why": c.why} for m, (c, _) in self._chosen.items()}
        return {"models": chosen}


#: this process's choices
ATTENTION = Attention()


# -- the pass, in a child process ---------------------------------------------------------
def measure(shape: Shape, timeout: float = TIMEOUT_SECONDS) -> dict[str, Costs]:
    """Both kernels' costs for a shape, timed in a child process (a kernel that crashes
    takes the child, not the engine). Raises RuntimeError where the pass fails."""
    with tempfile.TemporaryDirectory(prefix="coderai-attention-") as folder:
        try:
            child = subprocess.run(
                [sys.executable, "-m", __name__, folder, json.dumps(asdict(shape))],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the timed pass did not end within {timeout:.0f} s") from None
        if child.returncode != 0:
            last = next((s for s in reversed(child.stderr.splitlines()) if s.strip()), "")
            raise RuntimeError(f"the timed pass ended with exit {child.returncode}: {last[-200:]}")
        try:
            timings = json.loads((Path(folder) / TIMINGS).read_text())
            return {kernel: fit(**timings[kernel]) for kernel, _ in FLASH_TYPES}
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            raise RuntimeError(f"the timed pass left no timings to read ({exc!r})") from None


def write_model(path: Path, shape: Shape) -> None:
    """A Llama with the shape's attention, LAYERS layers and little else (random f16
    weights: only the kernels' times matter)."""
    import gguf
    import numpy as np

    from coderai.engine.backends.llamacpp.probe import add_vocabulary

    rng = np.random.default_rng(0)
    inner = shape.heads * shape.head_size
    kv = shape.kv_heads * shape.head_size
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("coderai-attention")
    writer.add_context_length(DEPTH + 2 * CHUNK)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_size)
    writer.add_value_length(shape.head_size)
    writer.add_rope_dimension_count(shape.head_size)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    add_vocabulary(writer, VOCAB)

    def add(name: str, rows: int, cols: int = 0) -> None:
        if cols:
            writer.add_tensor(name, rng.normal(0.0, 0.05, (rows, cols)).astype(np.float16))
        else:
            writer.add_tensor(name, np.ones(rows, dtype=np.float32))

    add("token_embd.weight", VOCAB, WIDTH)
    add("output_norm.weight", WIDTH)
    add("output.weight", VOCAB, WIDTH)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", WIDTH)
        add(f"blk.{i}.ffn_norm.weight", WIDTH)
        add(f"blk.{i}.attn_q.weight", inner, WIDTH)
        add(f"blk.{i}.attn_k.weight", kv, WIDTH)
        add(f"blk.{i}.attn_v.weight", kv, WIDTH)
        add(f"blk.{i}.attn_output.weight", WIDTH, inner)
        add(f"blk.{i}.ffn_gate.weight", FEED_FORWARD, WIDTH)
        add(f"blk.{i}.ffn_up.weight", FEED_FORWARD, WIDTH)
        add(f"blk.{i}.ffn_down.weight", WIDTH, FEED_FORWARD)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _timings(folder: Path, shape: Shape) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Each kernel's timings (fit's arguments), on the engine's threads. Both kernels'
    contexts are filled side by side, their timings taken in turns, so that what else
    the machine does at a moment weighs on both alike."""
    import llama_cpp
    from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
    from llama_cpp._logger import set_verbose

    path = folder / "attention.gguf"
    write_model(path, shape)
    set_verbose(False)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    model = LlamaModel(path_model=str(path), params=params, verbose=False)
    cores = len(os.sched_getaffinity(0))
    tokens = [(i * 7919) % (VOCAB - 2) for i in range(DEPTH + 2 * CHUNK)]
    batch = LlamaBatch(n_tokens=CHUNK, embd=0, n_seq_max=1, verbose=False)
    contexts = {}
    for kernel, flash in FLASH_TYPES:
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = DEPTH + 2 * CHUNK
        cp.n_batch = cp.n_ubatch = CHUNK
        cp.n_threads = cp.n_threads_batch = cores
        cp.type_k = cp.type_v = shape.kv_type
        cp.flash_attn_type = flash
        cp.no_perf = True
        contexts[kernel] = LlamaContext(model=model, params=cp, verbose=False)

    def timed(kernel: str, at: int, count: int, times: int) -> float:
        """The least of a few timings of reading `count` tokens at `at` (what the work
        costs when nothing else runs): the cells are taken back after each but the last."""
        context = contexts[kernel]
        memory = llama_cpp.llama_get_memory(context.ctx)
        best = float("inf")
        for time_ in range(times):
            batch.set_batch(tokens[at : at + count], n_past=at, logits_all=count == 1)
            started = time.perf_counter()
            context.decode(batch)
            best = min(best, time.perf_counter() - started)
            if time_ < times - 1:
                llama_cpp.llama_memory_seq_rm(memory, 0, at, -1)
        return best

    out: dict[str, dict[str, list[tuple[int, float]]]] = {
        kernel: {"reads": [], "steps": []} for kernel, _ in FLASH_TYPES
    }
    for kernel, _ in FLASH_TYPES:  # warms the kernels and the allocator
        timed(kernel, 0, CHUNK, 1)
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(contexts[kernel].ctx), True)
    for turn, at in enumerate(range(0, DEPTH + CHUNK, CHUNK)):
        for kernel, _ in FLASH_TYPES[:: 1 if turn % 2 else -1]:
            out[kernel]["steps"].append((at, timed(kernel, at, 1, STEPS)))
            memory = llama_cpp.llama_get_memory(contexts[kernel].ctx)
            llama_cpp.llama_memory_seq_rm(memory, 0, at, -1)
            out[kernel]["reads"].append((at, timed(kernel, at, CHUNK, READS)))
    return out


def main() -> int:
    folder, shape = Path(sys.argv[1]), Shape(**json.loads(sys.argv[2]))
    (folder / TIMINGS).write_text(json.dumps(_timings(folder, shape)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
