"""What the CPU, the kernel and the llama.cpp build say about AMX, and what follows for
llama.cpp's CPU "extra buffer types" (repacked weights; AMX).

Intel's AMX tile registers are state the Linux kernel hands out per process: a CPU that
reports `amx_tile` in /proc/cpuinfo runs AMX code only once `arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)` has succeeded, and a kernel or hypervisor may refuse it. A llama.cpp
built with AMX code (its system info lists AMX_INT8) on such a machine is where the extra
buffer types are not to be trusted; everywhere else they are on by default, as in
llama.cpp itself.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import platform
import sys
from pathlib import Path

log = logging.getLogger("coderai.engine")

#: arch_prctl's number on x86-64 Linux, the request for a dynamic XSAVE feature, and the
#: feature number of the AMX tile data (arch/x86/include/uapi/asm/prctl.h, fpu/types.h)
_SYS_ARCH_PRCTL = 158
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
CPUINFO = Path("/proc/cpuinfo")


@dataclasses.dataclass(frozen=True)
class Amx:
    #: the CPU lists amx_tile among its flags
    reported: bool
    #: the kernel granted this process the tile state (asked only where it matters: the CPU
    #: reports AMX and the build has AMX code)
    granted: bool
    #: the loaded llama.cpp was compiled with AMX code
    in_build: bool


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


def extra_buffer_types_default(amx: Amx) -> tuple[bool, str | None]:
    """Whether the extra buffer types are on for a model entry that does not say, and why
    not, when not."""
    if not amx.in_build or amx.granted:
        return True, None
    if amx.reported:
        why = "the CPU reports AMX but the kernel does not grant it"
    else:
        why = "this llama.cpp build has AMX code but the CPU does not report AMX"
    return False, (
        f"{why}: llama.cpp's extra buffer types (repacked weights) stay off;"
        " set extra_buffer_types to force them"
    )


def _kernel_grants_amx() -> bool:
    """Asks the kernel for the AMX tile state, as llama.cpp's AMX code does before using
    it (the grant is for the whole process and lasts)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return bool(libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0)


@functools.cache
def amx() -> Amx:
    """This machine's and the installed llama.cpp's AMX facts (read once per process)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    in_build = any(name.startswith("AMX") for name in system_info_features(info))
    try:
        reported = "amx_tile" in cpu_flags(CPUINFO.read_text())
    except OSError:
        reported = False
    granted = reported and in_build and _kernel_grants_amx()
    return Amx(reported=reported, granted=granted, in_build=in_build)


def extra_buffer_types(option: object) -> bool:
    """A model entry's `extra_buffer_types`: its own value if it gives one, else the
    default for this machine, saying why where that is off."""
    if option is not None:
        return bool(option)
    enabled, why = extra_buffer_types_default(amx())
    if why:
        log.warning(why)
    return enabled
