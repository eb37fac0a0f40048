"""Flash attention's default (llamacpp/backend.py, default_flash_attn): where it pays or is
needed, as measured; a model entry's `flash_attn` overrides it."""

from __future__ import annotations

from coderai.engine.backends.llamacpp.backend import default_flash_attn


def test_on_the_cpu_it_is_on_for_a_windowed_model_only() -> None:
    assert default_flash_attn(False, "f16", windowed=True)
    assert not default_flash_attn(False, "f16", windowed=False)


def test_a_gpu_or_a_quantized_cache_turns_it_on() -> None:
    assert default_flash_attn(True, "f16", windowed=False)
    assert default_flash_attn(False, "q8_0", windowed=False)
    assert default_flash_attn(False, "q4_0", windowed=False)
