"""Tiny real models built offline, for tests and benchmarks of the real backends.

One random Llama (64-wide, 2 layers) with a byte-level BPE tokenizer trained here, saved
for transformers (config.json + safetensors) and written again as a GGUF file with the same
weights, so llama.cpp and transformers can be compared token for token. Nothing is
downloaded. Random weights need care to give varied text (see ../shared/FACTS.md): a wide
initialisation, untied output weights, and zero output rows for special and raw-byte tokens,
which otherwise win every argmax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]
#: the fill-in-the-middle tokens of the FIM variant (prefix, suffix, middle), spelt as
#: Qwen2.5-Coder spells them
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_CORPUS = """
The quick brown fox jumps over the lazy dog. A model streams tokens to a client over a bus.
Engines load weights, the front relays events, and the queue holds what waits for a slot.
What is the capital of France? Paris is the capital of France. Berlin is in Germany.
Numbers like 1, 2, 3 and 42 appear in text; so do questions, answers and lists of things.
Servers answer requests; clients read streams; every token arrives in order, none is lost.
"""
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
VOCAB = 384
CONTEXT = 512


def build(
    out: Path,
    seed: int = 0,
    fim: bool = False,
    chat_template: bool | str = True,
    context: int = CONTEXT,
) -> tuple[Path, Path]:
    """Write <out>/hf (transformers folder) and <out>/tiny.gguf; return both paths. With
    `fim`, the variant whose vocabulary also has FIM_TOKENS (special tokens, named in the
    GGUF's metadata as its fill-in-the-middle tokens); its weights differ from the plain
    model's. Without `chat_template`, neither the tokenizer nor the GGUF has one (as base
    models ship); given as text, both carry that template (a model family's). `context`:
    the positions it takes (more for a family's long markup)."""
    hf = out / "hf"
    gguf_path = out / "tiny.gguf"
    specials = SPECIAL_TOKENS + FIM_TOKENS if fim else SPECIAL_TOKENS
    tokenizer = _tokenizer(specials, chat_template)
    model = _model(tokenizer, seed, specials, context)
    hf.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    _write_gguf(gguf_path, model, tokenizer, specials)
    return hf, gguf_path


def build_windowed(out: Path, window: int = 16, seed: int = 0) -> Path:
    """Write <out>/windowed.gguf: the tiny model's shape as a Gemma 3, whose first layer
    attends only to the last `window` positions (llama.cpp's sliding-window cache, as
    Gemma 3, Gemma 2 and gpt-oss have it) and whose second attends to all. For tests of
    prefix reuse where a window slides; no transformers twin."""
    tokenizer = _tokenizer(SPECIAL_TOKENS, True)
    model = _model(tokenizer, seed, SPECIAL_TOKENS)
    path = out / "windowed.gguf"
    out.mkdir(parents=True, exist_ok=True)
    _write_gguf(path, model, tokenizer, SPECIAL_TOKENS, window=window)
    return path


def build_recurrent(out: Path, seed: int = 0) -> Path:
    """Write <out>/recurrent.gguf: a tiny Mamba (a state-space model: one recurrent state
    per sequence, no KV cells) with the tiny model's tokenizer and embeddings, random
    weights. For tests of prefix reuse on recurrent models; no transformers twin."""
    import gguf
    import numpy as np

    tokenizer = _tokenizer(SPECIAL_TOKENS, True)
    model = _model(tokenizer, seed, SPECIAL_TOKENS)
    path = out / "recurrent.gguf"
    out.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "mamba")
    _write_vocabulary(writer, tokenizer, SPECIAL_TOKENS)
    inner, state, conv, rank = 2 * HIDDEN, 16, 4, 8
    writer.add_name("coderai-tiny-mamba")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_ssm_conv_kernel(conv)
    writer.add_ssm_inner_size(inner)
    writer.add_ssm_state_size(state)
    writer.add_ssm_time_step_rank(rank)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    weights = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(seed)

    def add(name: str, array: Any) -> None:
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    def random(*shape: int, scale: float = 0.5) -> Any:
        return rng.normal(0.0, scale, shape)

    add("token_embd.weight", weights["model.embed_tokens.weight"])
    add("output_norm.weight", np.ones(HIDDEN))
    add("output.weight", weights["lm_head.weight"])
    for i in range(LAYERS):  # numpy shapes are llama.cpp's reversed
        add(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN))
        add(f"blk.{i}.ssm_in.weight", random(2 * inner, HIDDEN))
        add(f"blk.{i}.ssm_conv1d.weight", random(inner, conv))
        add(f"blk.{i}.ssm_conv1d.bias", random(inner, scale=0.1))
        add(f"blk.{i}.ssm_x.weight", random(rank + 2 * state, inner))
        add(f"blk.{i}.ssm_dt.weight", random(inner, rank))
        add(f"blk.{i}.ssm_dt.bias", random(inner, scale=0.1))
        add(f"blk.{i}.ssm_a", -np.exp(random(inner, state, scale=0.3)))  # decays
        add(f"blk.{i}.ssm_d", np.ones(inner))
        add(f"blk.{i}.ssm_out.weight", random(HIDDEN, inner))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tokenizer(specials: list[str], chat_template: bool | str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>"
    )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE if chat_template is True else chat_template
    return fast


def _model(tokenizer: Any, seed: int, specials: list[str], context: int = CONTEXT) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=context,
        initializer_range=0.5,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    vocab = tokenizer.get_vocab()
    byte_tokens = [vocab[c] for c in _byte_alphabet() if c in vocab]
    silenced = [vocab[t] for t in specials] + byte_tokens
    with torch.no_grad():
        model.lm_head.weight[silenced] = 0.0
    model.eval()
    return model


def _byte_alphabet() -> list[str]:
    from tokenizers import pre_tokenizers

    return list(pre_tokenizers.ByteLevel.alphabet())


def _permute(weights: Any, heads: int) -> Any:
    """llama.cpp stores Q and K with the rotary halves interleaved per head."""
    rows = weights.shape[0]
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _write_vocabulary(writer: Any, tokenizer: Any, specials: list[str]) -> None:
    """The tokenizer as llama.cpp reads it: byte-level BPE, its special tokens, the chat
    template."""
    import json

    import gguf

    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = set(specials)
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    if FIM_TOKENS[0] in special:
        keys = gguf.Keys.Tokenizer
        fim_keys = (keys.FIM_PRE_ID, keys.FIM_SUF_ID, keys.FIM_MID_ID)
        for key, token in zip(fim_keys, FIM_TOKENS, strict=True):
            writer.add_uint32(key, vocab[token])
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def _write_gguf(
    path: Path, model: Any, tokenizer: Any, specials: list[str], window: int = 0
) -> None:
    """The model as llama.cpp reads it: a Llama, or with `window` a Gemma 3 whose first
    layer has that sliding window (its extra norms are ones: identity at this scale)."""

    import gguf
    import numpy as np

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "gemma3" if window else "llama")
    writer.add_name("coderai-tiny")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    head = cfg.hidden_size // cfg.num_attention_heads
    if window:
        writer.add_sliding_window(window)
        writer.add_sliding_window_pattern([i == 0 for i in range(cfg.num_hidden_layers)])
        writer.add_key_length(head)
        writer.add_value_length(head)

    _write_vocabulary(writer, tokenizer, specials)

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads

    def add(name: str, array: Any) -> None:
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    add("token_embd.weight", state["model.embed_tokens.weight"])
    add("output_norm.weight", state["model.norm.weight"])
    add("output.weight", state["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        add(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"])
        add(f"blk.{i}.attn_q.weight", _permute(state[p + "self_attn.q_proj.weight"], heads))
        add(f"blk.{i}.attn_k.weight", _permute(state[p + "self_attn.k_proj.weight"], kv_heads))
        add(f"blk.{i}.attn_v.weight", state[p + "self_attn.v_proj.weight"])
        add(f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"])
        add(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"])
        add(f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"])
        add(f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"])
        add(f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"])
        if window:
            ones = np.ones(cfg.hidden_size)
            for norm in ("post_attention_norm", "post_ffw_norm"):
                add(f"blk.{i}.{norm}.weight", ones)
            add(f"blk.{i}.attn_q_norm.weight", np.ones(head))
            add(f"blk.{i}.attn_k_norm.weight", np.ones(head))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
