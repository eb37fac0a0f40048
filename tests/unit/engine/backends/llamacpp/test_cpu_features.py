"""What the CPU's flags and llama.cpp's build info say, as repack.py reads them to name a
machine's verdict (the machines with AMX that this one lacks, as plain text)."""

from __future__ import annotations

from coderai.engine.backends.llamacpp.cpu_features import cpu_flags, system_info_features

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
