"""The trial that decides llama.cpp's CPU "extra buffer types" (repacked weights, AMX) on
this machine: a child process loads a tiny quantized model with them on and reads one
batch through the kernels they choose, then exits.

Why a trial: on some Intel Xeon VMs the CPU lists `amx_tile`, the kernel grants the tile
state, and llama.cpp still dies with SIGILL once a prompt of a few hundred tokens is read
(FACTS.md); no flag the process can read says so. ggml's AMX kernels take a matrix product
whose activations have more than one row (`ggml_backend_amx_mul_mat`: one row goes to the
AVX-512 VNNI path instead), its weights Q4_0/Q4_1/Q8_0 (rows a multiple of 32) or K-quants
(of 256); the repacked AVX kernels take Q4_0/Q8_0 with rows in eights. The probe's model
has such weights only, and its batch is the 512 tokens that killed llama.cpp there, so the
trial reaches both; a one-token step after it reaches the VNNI path.

Run as `python -m coderai.engine.backends.llamacpp.probe FOLDER` (its model is written
there): exit 0 when every step ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderai.common.exits import exit_words, signal_name
from coderai.engine import die_at

#: the batch read with the extra buffer types on (tokens)
BATCH = 512
#: the probe's model: 2 layers, 256 wide, a 512-token vocabulary
WIDTH, FEED_FORWARD, LAYERS, HEADS, VOCAB = 256, 512, 2, 4, 512
#: how long the trial may take before it counts as failed (a hang is no verdict to trust)
TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Trial:
    works: bool
    #: what the trial showed, in words (the engine's log, /healthz and the console)
    why: str
    #: the signal the child died of, by name, if it did
    signal: str | None = None
    seconds: float = 0.0


def run(timeout: float = TIMEOUT_SECONDS) -> Trial:
    """Run the trial in a child process and read its end."""
    started = time.monotonic()
    # the folder is the parent's: a child that dies of a signal leaves nothing behind
    with tempfile.TemporaryDirectory(prefix="coderai-probe-") as folder:
        try:
            child = subprocess.run(
                [sys.executable, "-m", __name__, folder],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Trial(False, f"the trial did not end within {timeout:.0f} s",
                         seconds=time.monotonic() - started)  # fmt: skip
    return judged(child.returncode, child.stderr, time.monotonic() - started)


def judged(code: int, stderr: str, seconds: float) -> Trial:
    """What the child's exit says (pure)."""
    batch = f"a {BATCH}-token batch"
    if code == 0:
        return Trial(True, f"a trial read {batch} with them on", seconds=seconds)
    if code < 0:
        return Trial(False, f"a trial {exit_words(code)} reading {batch} with them on",
                     signal=signal_name(code), seconds=seconds)  # fmt: skip
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return Trial(False, f"a trial with them on failed (exit {code}): {last[-200:]}",
                 seconds=seconds)  # fmt: skip


def write_model(path: Path) -> None:
    """The probe's GGUF: a Llama with quantized weights (random: only the kernels matter)
    and a byte-level vocabulary llama.cpp accepts."""
    import gguf
    import numpy as np
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    kinds = gguf.GGMLQuantizationType
    q4, q8, q4k, q6k = kinds.Q4_0, kinds.Q8_0, kinds.Q4_K, kinds.Q6_K
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("coderai-probe")
    writer.add_context_length(2 * BATCH)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    add_vocabulary(writer, VOCAB)

    def add(name: str, rows: int, cols: int = 0, qtype: Any = None) -> None:
        if not cols:
            writer.add_tensor(name, np.ones(rows, dtype=np.float32))
        elif qtype in _SCALE_AT:
            writer.add_tensor(name, k_quant(rng, rows, cols, qtype), raw_dtype=qtype)
        else:
            weights = rng.normal(0.0, 0.05, (rows, cols)).astype(np.float32)
            writer.add_tensor(name, quantize(weights, qtype), raw_dtype=qtype)

    add("token_embd.weight", VOCAB, WIDTH, q8)
    add("output_norm.weight", WIDTH)
    add("output.weight", VOCAB, WIDTH, q8)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", WIDTH)
        add(f"blk.{i}.ffn_norm.weight", WIDTH)
        # the types real GGUFs hold: Q4_0 and Q8_0, and a Q4_K_M file's Q4_K and Q6_K
        for part in ("attn_q", "attn_k", "attn_output"):
            add(f"blk.{i}.{part}.weight", WIDTH, WIDTH, q4)
        add(f"blk.{i}.attn_v.weight", WIDTH, WIDTH, q6k)
        add(f"blk.{i}.ffn_gate.weight", FEED_FORWARD, WIDTH, q4k if i else q8)
        add(f"blk.{i}.ffn_up.weight", FEED_FORWARD, WIDTH, q8 if i else q4k)
        add(f"blk.{i}.ffn_down.weight", WIDTH, FEED_FORWARD, q4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


#: where a K-quant block (256 weights) keeps its f16 scale `d`: Q4_K's {d, dmin, scales[12],
#: qs[128]} leads with it; Q6_K's {ql[128], qh[64], scales[16], d} ends with it (ggml's
#: block_q4_K and block_q6_K)
_SCALE_AT = {12: (0, 2), 14: (208,)}


def k_quant(rng: Any, rows: int, cols: int, qtype: Any) -> Any:
    """Random K-quant blocks (the gguf package quantizes to these only in C): any bytes
    are weights, once each block's f16 scales are small finite numbers."""
    import gguf
    import numpy as np

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
    for at in _SCALE_AT[int(qtype)]:
        blocks[:, :, at : at + 2] = scale
    return blocks.reshape(rows, -1)


def add_vocabulary(writer: Any, size: int) -> None:
    """A byte-level BPE vocabulary of `size` tokens llama.cpp accepts (it wants one merge
    at least), its last three the merged pair, the start and the end."""
    import gguf

    alphabet = byte_alphabet()
    tokens = [*alphabet, *(f"<t{i}>" for i in range(size - len(alphabet) - 1)), "ab"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(size - 2)
    writer.add_eos_token_id(size - 3)


def byte_alphabet() -> list[str]:
    """The 256 characters byte-level BPE spells bytes with: printable Latin-1 bytes as
    themselves, the others moved past U+0100 in order (as GPT-2's tokenizer does)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    moved = iter(range(0x100, 0x200))
    return [chr(b) if b in kept else chr(next(moved)) for b in range(256)]


def _trial(folder: Path) -> int:
    import llama_cpp
    from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
    from llama_cpp._logger import set_verbose

    path = folder / "probe.gguf"
    write_model(path)
    set_verbose(False)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = True
    model = LlamaModel(path_model=str(path), params=params, verbose=False)
    cores = len(os.sched_getaffinity(0))
    context_params = llama_cpp.llama_context_default_params()
    context_params.n_ctx = 2 * BATCH
    context_params.n_batch = context_params.n_ubatch = BATCH
    context_params.n_threads = context_params.n_threads_batch = cores
    context = LlamaContext(model=model, params=context_params, verbose=False)
    batch = LlamaBatch(n_tokens=BATCH, embd=0, n_seq_max=1, verbose=False)
    batch.set_batch([i % (VOCAB - 3) for i in range(BATCH)], n_past=0, logits_all=False)
    die_at.at("probe", repack=True)  # the trial has them on
    context.decode(batch)
    batch.set_batch([7], n_past=BATCH, logits_all=True)
    context.decode(batch)
    return 0


def main() -> int:
    return _trial(Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
