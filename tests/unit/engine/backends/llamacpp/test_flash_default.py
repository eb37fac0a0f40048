"""Flash attention's choice where nothing needs timing (llamacpp/attention.py, rule): where
it pays or is needed, as measured; a model entry's `flash_attn` overrides it."""

from __future__ import annotations

from coderai.engine.backends.llamacpp.attention import rule


def test_on_the_cpu_a_windowed_model_has_it_and_a_full_attention_one_is_timed() -> None:
    windowed = rule(None, False, False, windowed=True)
    assert windowed is not None and windowed.flash
    assert rule(None, False, False, windowed=False) is None


def test_a_gpu_or_a_quantized_cache_turns_it_on() -> None:
    for fixed in (rule(None, True, False, False), rule(None, False, True, False)):
        assert fixed is not None and fixed.flash


def test_the_entry_forces_either_and_a_recurrent_model_has_nothing_to_time() -> None:
    for option in (True, False):
        forced = rule(option, True, True, True)
        assert forced is not None and forced.flash is option
        assert "flash_attn" in forced.why
    recurrent = rule(None, False, False, False, recurrent=True)
    assert recurrent is not None and not recurrent.flash
