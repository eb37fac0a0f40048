"""Whether llama.cpp's extra buffer types are on by default, from the AMX facts of the CPU,
the kernel and the build (the machines with AMX that this one lacks, as plain records)."""

from __future__ import annotations

import logging

import pytest

from coderai.engine.backends.llamacpp import cpu_features
from coderai.engine.backends.llamacpp.cpu_features import (
    Amx,
    cpu_flags,
    extra_buffer_types,
    extra_buffer_types_default,
    system_info_features,
)

#: llama_print_system_info() of an AVX2 build, and of a native build on a Sapphire Rapids
AVX2_INFO = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 |"
    " LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
AMX_INFO = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 |"
    " AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 |"
    " LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)


def test_the_build_features_are_the_entries_set_to_one() -> None:
    assert "AMX_INT8" in system_info_features(AMX_INFO)
    assert system_info_features(AVX2_INFO) == {
        "SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP", "REPACK",
    }  # fmt: skip


def test_a_feature_set_to_zero_is_not_listed() -> None:
    assert system_info_features("CPU : AVX2 = 1 | AMX_INT8 = 0 |") == {"AVX2"}


def test_cpu_flags_are_read_from_the_first_flags_line() -> None:
    cpuinfo = (
        "processor\t: 0\nmodel name\t: Intel Xeon\n"
        "flags\t\t: fpu avx2 amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_bf16", "amx_tile", "amx_int8"}


def test_no_flags_line_means_no_flags() -> None:
    assert cpu_flags("processor\t: 0\nFeatures\t: neon asimd\n") == frozenset()


def test_extra_buffer_types_are_on_where_the_build_has_no_amx_code() -> None:
    for reported in (False, True):
        assert extra_buffer_types_default(Amx(reported, False, in_build=False)) == (True, None)


def test_extra_buffer_types_are_on_where_the_kernel_grants_amx() -> None:
    assert extra_buffer_types_default(Amx(True, True, in_build=True)) == (True, None)


def test_extra_buffer_types_are_off_where_the_cpu_reports_amx_the_kernel_withholds() -> None:
    enabled, why = extra_buffer_types_default(Amx(True, False, in_build=True))
    assert not enabled
    assert why is not None
    assert why.startswith("the CPU reports AMX but the kernel does not grant it")
    assert "set extra_buffer_types to force them" in why


def test_extra_buffer_types_are_off_where_amx_code_meets_a_cpu_without_amx() -> None:
    enabled, why = extra_buffer_types_default(Amx(False, False, in_build=True))
    assert not enabled
    assert why is not None and "the CPU does not report AMX" in why


WITHHELD = Amx(reported=True, granted=False, in_build=True)


@pytest.mark.parametrize("option", [True, False])
def test_a_model_entrys_own_value_wins(
    option: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cpu_features, "amx", lambda: WITHHELD)
    assert extra_buffer_types(option) is option
    assert not caplog.records


def test_the_default_off_is_logged_once_per_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cpu_features, "amx", lambda: WITHHELD)
    with caplog.at_level(logging.WARNING, logger="coderai.engine"):
        assert extra_buffer_types(None) is False
    assert [r.getMessage()[:52] for r in caplog.records] == [
        "the CPU reports AMX but the kernel does not grant it"
    ]
