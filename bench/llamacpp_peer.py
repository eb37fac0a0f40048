"""llama.cpp's own `llama-server` and `llama-bench`, built from the sources the installed
llama-cpp-python's sdist vendors, with the ggml configuration pip gave that library: the
peers the llama.cpp benchmark measures our engine against, like with like.

    python -m bench.llamacpp_peer [--rebuild]

The first call downloads the sdist (pip) and builds both tools with cmake (~12 minutes on
2 cores) into `$CODERAI_CACHE_DIR/llama.cpp-<version>/` (default `~/.cache/coderai`); later
calls reuse the binaries. It prints their paths and the CPU features compiled in, which
must equal the installed library's (`llama_print_system_info()`), else it fails.

How pip built the library: scikit-build-core, `CMAKE_BUILD_TYPE=Release`, llama.cpp added
as a subdirectory with shared libraries and curl off, every ggml option at its default
(`GGML_NATIVE` on, so `-march=native`; OpenMP, llamafile and the CPU repack on; AMX only
where native detection finds it), plus whatever `CMAKE_ARGS` held at install time. The same
`CMAKE_ARGS`, if set now, are passed on here.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from coderai.engine.backends.llamacpp.cpu_features import system_info_features
from coderai.engine.backends.transformers.backend import cache_root

PACKAGE = "llama_cpp_python"
TOOLS = ("llama-server", "llama-bench")
#: pip's configuration of the vendored tree (llama-cpp-python's CMakeLists.txt forces
#: shared libraries and curl off; scikit-build-core builds Release), and what the tools
#: alone need: no web UI (whose assets the build would otherwise download), no HTTPS
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
#: prints the CPU features a libllama was compiled with, loaded in a child process so two
#: builds of llama.cpp never share one
_SYSTEM_INFO = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.llama_print_system_info.restype = ctypes.c_char_p
print(lib.llama_print_system_info().decode())
"""


def installed_version() -> str:
    return importlib.metadata.version(PACKAGE)


def home(version: str | None = None) -> Path:
    return cache_root() / f"llama.cpp-{version or installed_version()}"


def binary(tool: str, version: str | None = None) -> Path:
    return home(version) / "build" / "bin" / tool


def library_system_info(libllama: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", _SYSTEM_INFO, str(libllama)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def installed_libllama() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None, "llama-cpp-python is not installed"
    return Path(spec.origin).parent / "lib" / "libllama.so"


def _sources(root: Path, version: str) -> Path:
    """The vendored llama.cpp tree, from the sdist pip downloads (once)."""
    src = root / "src"
    if (src / "CMakeLists.txt").is_file():
        return src
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             "--dest", tmp, f"llama-cpp-python=={version}"],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("*.tar.gz")
        prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
            for m in members:
                m.name = m.name[len(prefix) :]
            archive.extractall(Path(tmp) / "src", members=members, filter="data")
        shutil.rmtree(src, ignore_errors=True)
        (Path(tmp) / "src").rename(src)
    return src


def ensure_built(version: str | None = None, rebuild: bool = False) -> dict[str, Path]:
    """The paths of llama-server and llama-bench, built first if they are not yet."""
    version = version or installed_version()
    root = home(version)
    paths = {tool: binary(tool, version) for tool in TOOLS}
    if not rebuild and all(p.is_file() for p in paths.values()):
        return paths
    root.mkdir(parents=True, exist_ok=True)
    src = _sources(root, version)
    build = root / "build"
    extra = shlex.split(os.environ.get("CMAKE_ARGS", ""))
    subprocess.run(["cmake", "-S", src, "-B", build, *CMAKE_OPTIONS, *extra], check=True)
    subprocess.run(
        ["cmake", "--build", build, "--config", "Release", "-j", str(os.cpu_count() or 1),
         "--target", *TOOLS],
        check=True,
    )  # fmt: skip
    check_same_features(build / "bin" / "libllama.so")
    return paths


def check_same_features(peer_libllama: Path) -> None:
    """Fail if the peer's CPU backend was compiled with other features than the library's."""
    ours = system_info_features(library_system_info(installed_libllama()))
    theirs = system_info_features(library_system_info(peer_libllama))
    if ours != theirs:
        raise SystemExit(
            f"the peer build's CPU features differ from the installed library's: only in"
            f" ours {sorted(ours - theirs)}, only in the peer {sorted(theirs - ours)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="build again even if built")
    args = parser.parse_args()
    paths = ensure_built(rebuild=args.rebuild)
    peer_lib = paths["llama-bench"].parent / "libllama.so"
    check_same_features(peer_lib)
    for tool, path in paths.items():
        print(f"{tool}: {path}")
    print("CPU features:", " ".join(sorted(system_info_features(library_system_info(peer_lib)))))


if __name__ == "__main__":
    main()
