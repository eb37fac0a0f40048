"""The options a catalogue entry may give its model, by the backend that runs it. An option
no backend reads would be accepted and do nothing (a misspelt `n_ctx`, or `speculative`
before speculation exists): such an entry is refused, naming the option, where the
catalogue is read (entries.py), and again by the engine that loads it (a spec that did
not come through a catalogue). The README documents each option beside its backend.
"""

from __future__ import annotations

from collections.abc import Mapping

#: read for a model of any format
ANY = frozenset({
    "memory_mb",  # the size the engine's pool accounts for it
    "chat_template",  # coderai/catalogue/templatefile.py
    "tool_format",  # engine/chat_template.py
    "reasoning_format",  # engine/chat_template.py
    "backend",  # a GGUF run by transformers (file_format.required_capability)
    "context_length",  # a node's or broker's report of the context
    "bare_tool_calls",  # engine/decoding/bare_call.py (false: off)
})  # fmt: skip

#: what each backend reads, by the capability that runs it (file_format.required_capability)
BY_BACKEND: Mapping[str, frozenset[str]] = {
    "gguf": frozenset({
        "n_ctx", "n_batch", "parallel", "reserve_tokens", "prefix_cache_tokens",
        "prefill_step_ms", "n_threads", "n_threads_batch", "n_gpu_layers", "kv_cache",
        "flash_attn", "extra_buffer_types", "swa_full", "checkpoints", "checkpoint_every",
        "prompt_cache_ram_mb", "prompt_cache_disk_mb", "speculative", "draft_length", "mmproj",
    }),
    "transformers": frozenset({"dtype", "max_gpu_percent", "balanced_gpu_percent", "max_vram"}),
    "fake": frozenset({
        "tokens_per_second", "load_seconds", "output_tokens", "context", "capacity",
        "fail_after_tokens", "crash_after_tokens", "hang_after_tokens", "token_chars",
        "script", "script_token_chars", "script_rules", "embedding_dims",
        "prompt_tokens_per_step",
    }),
}  # fmt: skip


def unknown(options: Mapping[str, object], backend: str | None) -> list[str]:
    """The options the backend that runs the model does not read (with no backend known
    yet, a format still to be read from the file: those no backend reads)."""
    if backend is None:
        known = ANY.union(*BY_BACKEND.values())
    else:
        known = ANY | BY_BACKEND.get(backend, frozenset())
    return sorted(name for name in options if name not in known)


def refusal(options: Mapping[str, object], backend: str | None) -> str | None:
    """Why an entry's options cannot be taken, or None."""
    if options.get("backend", "transformers") != "transformers":
        # the one choice it makes: a misspelt value would silently run on llama.cpp
        return f"backend {options['backend']!r}: a GGUF may ask for 'transformers' only"
    names = unknown(options, backend)
    if not names:
        return None
    who = f"the {_NAMES.get(backend, backend)} backend" if backend else "any backend"
    listed = ", ".join(map(repr, names))
    return f"unknown model option{'s' * (len(names) > 1)} {listed}: not read by {who}"


_NAMES = {"gguf": "llama.cpp"}
