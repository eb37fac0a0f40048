"""What the CPU and the llama.cpp build say of themselves: /proc/cpuinfo's flags and the
features llama.cpp's system info lists. They name a machine and a build (repack.py keys its
verdicts by them) but do not say whether a kernel runs: on some Xeon VMs the CPU lists
`amx_tile`, the kernel grants the tile state, and AMX code still traps (FACTS.md). Whether
llama.cpp's extra buffer types are on is decided by trial (probe.py)."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of the first processor in /proc/cpuinfo's text (x86's `flags` line)."""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def system_info_features(system_info: str) -> frozenset[str]:
    """The features llama_print_system_info() lists as `NAME = 1` (its CPU backend's
    compile-time features: AVX2, AMX_INT8, REPACK, …)."""
    features = set()
    for part in system_info.split("|"):
        name, _, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name and value.strip() == "1":
            features.add(name)
    return frozenset(features)
