"""CoderAI on a real NVIDIA GPU, in one command of at most 8 minutes: what only a GPU can
show, measured and written down (one JSON result, one short text summary).

Prepare here, once (the package registry and SmolLM2's GGUF are needed):

    .venv/bin/python -m bench.gpu_prepare        # fills .gpu/ (about 27 MiB, git ignores it)

Run there (the device tool's `run`, with `carry: [".gpu"]`, from the repo's root):

    PYTHONUNBUFFERED=1 python3 -m bench.gpu_check --carried .gpu --out $OUT

The GPU machine has PyTorch (CUDA), transformers, accelerate, aiohttp, msgpack, psutil,
prometheus-client and nvidia-ml-py, and no network: the wheels in .gpu/wheels are
installed beside them (to /tmp/coderai-site, first on the path). Then, each a step whose
outcome and time are recorded (a failed step does not stop the ones that do not need it):

1. the environment: Python, torch and its CUDA, the packages' versions, NVML's cards;
2. the models: the tiny transformers model (tests/support/tinymodel.py), and SmolLM2-135M's
   shape with random weights (its config and tokenizer carried; its weights cannot be:
   94 MB, a call carries 64 MiB);
3. `coderai run` with its engines planned from NVML (one per card), both models loaded on
   cuda:0 of their engine; VRAM before and after;
4. each model streamed through the front at 1, 8 and 32 requests at once (aiohttp, on the
   client's clock): tokens per second, time to first token, the gap between tokens (the
   engine's step, as a client sees it) against the front's CPU time per token;
5. /healthz and /metrics: VRAM per card and temperature, as the engines report them;
6. both models unloaded: the VRAM given back;
7. the tests marked `gpu` (an engine pinned to one card by CUDA_VISIBLE_DEVICES).

`--dry-run` (on a machine without a GPU): every step that needs no CUDA call runs, on the
CPU; the steps that do are recorded as skipped. llama.cpp on CUDA is not part of this
check: llama-cpp-python has no CUDA wheel, and building it there from its sdist for the
GPU's architecture alone takes longer than the time left (bench/REPORT.md: "GPU check").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SITE = Path("/tmp/coderai-site")
ADMIN = "gpu-check-admin-key"


class Check:
    """The result, written as it grows: a run cut short still leaves what it found."""

    def __init__(self, out: Path, budget: float) -> None:
        self.out = out
        self.started = time.monotonic()
        self.budget = budget
        self.result: dict[str, Any] = {"steps": [], "started": time.time()}

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def step(self, name: str, run: Callable[[], Any], skip: str | None = None) -> Any:
        record: dict[str, Any] = {"name": name}
        start = time.monotonic()
        if skip is None and self.left() < 20:
            skip = f"out of time ({self.budget:.0f} s budget)"
        if skip is not None:
            record.update(outcome="skipped", why=skip)
            value = None
        else:
            try:
                value = run()
                record["outcome"] = "passed"
            except Exception as exc:  # the step fails; the ones that do not need it go on
                record.update(outcome="failed", error=f"{exc.__class__.__name__}: {exc}",
                              trace=traceback.format_exc()[-2000:])  # fmt: skip
                value = None
        record["seconds"] = round(time.monotonic() - start, 2)
        self.result["steps"].append(record)
        said = record.get("error", record.get("why", ""))
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f} s] {name}: {record['outcome']} {said}".rstrip(), flush=True)
        self.save()
        return value

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.result, indent=2))
        (self.out / "gpu_check.txt").write_text(summary(self.result))

    def within(self, seconds: float) -> float:
        """A wait of at most `seconds`, and never past the budget's last 15 s."""
        return max(1.0, min(seconds, self.left() - 15))


def install(carried: Path) -> str:
    """The carried wheels, installed where the image's packages are not replaced."""
    wheels = sorted((carried / "wheels").glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"no wheels in {carried / 'wheels'} (bench/gpu_prepare.py fills it)")
    if sys.version_info[:2] != (3, 12):
        return f"not installed: they are for CPython 3.12, this is {sys.version.split()[0]}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(SITE),
                    *map(str, wheels)], check=True)  # fmt: skip
    # The one sys.path edit in bench/, and it is needed: the wheels land in a folder of their
    # own after this interpreter started (the image's site-packages are not ours to replace),
    # and must come before the image's packages, here and (PYTHONPATH) in every child. The
    # repo itself is on the path already: this runs as `python3 -m bench.gpu_check` from it.
    sys.path.insert(0, str(SITE))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SITE), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    # what the front, an engine and the backends import, beside the image's packages: a
    # version check at import (transformers') fails here, not in every later step
    probe = "import transformers, accelerate, pydantic, zmq, llguidance, gguf, coderai.front.app"
    done = subprocess.run([sys.executable, "-c", probe + ", coderai.engine.worker"],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the packages do not import together: {done.stderr[-1500:]}")
    return f"{len(wheels)} wheels into {SITE}"


def environment(dry: bool) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import torch

    found: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                             "torch_cuda": torch.version.cuda}  # fmt: skip
    for name in ("transformers", "accelerate", "tokenizers", "huggingface-hub", "pyzmq",
                 "pydantic", "pydantic-core", "llguidance", "aiohttp", "nvidia-ml-py",
                 "safetensors", "regex", "typing-extensions", "anyio", "idna", "hf-xet",
                 "msgpack", "psutil", "prometheus-client", "jinja2"):  # fmt: skip
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    if not dry:  # the first CUDA call
        found["cuda_available"] = torch.cuda.is_available()
        found["device"] = torch.cuda.get_device_name(0)
    return found


def cards() -> list[dict[str, Any]]:
    """Each NVIDIA card NVML sees, with its memory in use now (MiB)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [{"error": str(exc)}]
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
            out.append({"index": i, "uuid": str(pynvml.nvmlDeviceGetUUID(handle)),
                        "name": str(pynvml.nvmlDeviceGetName(handle)),
                        "total_mib": memory.total >> 20, "used_mib": memory.used >> 20,
                        "temp_c": temp})  # fmt: skip
        return out
    finally:
        pynvml.nvmlShutdown()


def smollm2(weights: Path, carried: Path) -> Path | None:
    """SmolLM2's GGUF, joined from the halves earlier calls left in `weights` and checked
    against the sha256 carried; None where they are not all there."""
    import hashlib

    parts = [weights / f"smollm2.gguf.{n}" for n in (1, 2)]
    if not all(p.is_file() for p in parts):
        return None
    whole = weights / "smollm2.gguf"
    with whole.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    expected = (carried / "smollm2" / "gguf.sha256").read_text().strip()
    if hashlib.sha256(whole.read_bytes()).hexdigest() != expected:
        raise RuntimeError(f"{whole} does not match the sha256 carried")
    return whole


def models(work: Path, carried: Path, weights: Path, tiny_only: bool) -> dict[str, str]:
    """The tiny model, and SmolLM2: its GGUF (which transformers converts as it loads), or
    where its halves did not travel, its shape with random weights and its tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.support.tinymodel import build

    tiny, _ = build(work / "tiny")
    if tiny_only:
        return {"tiny": str(tiny)}
    gguf = smollm2(weights, carried)
    if gguf is not None:
        return {"tiny": str(tiny), "smol": str(gguf)}
    smol = work / "smol"
    config = AutoConfig.from_pretrained(carried / "smollm2")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    model.save_pretrained(smol)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (carried / "smollm2" / name).exists():
            shutil.copy(carried / "smollm2" / name, smol / name)
    return {"tiny": str(tiny), "smol": str(smol)}


def entry(name: str, path: str, dtype: str) -> dict[str, Any]:
    """A catalogue entry the transformers backend runs (a GGUF too: it converts it)."""
    if path.endswith(".gguf"):
        options = {"dtype": dtype, "backend": "transformers"}
        return {"id": name, "path": path, "format": "gguf", "options": options}
    return {"id": name, "path": path, "format": "transformers", "options": {"dtype": dtype}}


def _admin(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    method = "POST" if data is not None or path.endswith(("/load", "/unload")) else "GET"
    request = urllib.request.Request(url + "/admin/api/" + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {ADMIN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _wait(what: Callable[[], bool], seconds: float) -> float:
    start = time.monotonic()
    while not what():
        if time.monotonic() - start > seconds:
            raise TimeoutError(f"not within {seconds:.0f} s")
        time.sleep(0.2)
    return round(time.monotonic() - start, 2)


def _loaded(url: str, model: str) -> bool:
    return any(model in e.get("loaded_models", []) for e in _admin(url, "engines")["engines"])


def _used(found: list[dict[str, Any]]) -> int:
    return sum(int(card.get("used_mib") or 0) for card in found)


def load(url: str, names: list[str], wait: Callable[[float], float], gpu: bool) -> dict[str, Any]:
    """Each model loaded by its engine; on a GPU machine the cards' memory must rise (a
    model left on the CPU would pass every other step)."""
    out: dict[str, Any] = {"before": cards()}
    for name in names:
        _admin(url, f"models/{urllib.parse.quote(name)}/load")
        out[f"{name}_seconds"] = _wait(lambda n=name: _loaded(url, n), wait(180))  # type: ignore[misc]
    out["after"] = cards()
    out["rise_mib"] = _used(out["after"]) - _used(out["before"])
    if gpu and out["rise_mib"] <= 0:
        raise RuntimeError(f"the cards' memory did not rise ({out}): the models are not on them")
    return out


def unload(url: str, names: list[str], wait: Callable[[float], float], gpu: bool) -> dict[str, Any]:
    for name in names:
        _admin(url, f"models/{urllib.parse.quote(name)}/unload")
        _wait(lambda n=name: not _loaded(url, n), wait(60))  # type: ignore[misc]
    if gpu:
        time.sleep(2)  # the engines' next VRAM reading; NVML is read directly below too
    return {"after_unload": cards(), "engines": _admin(url, "engines")["engines"]}


def readings(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    gpu = [line for line in text.splitlines() if line.startswith("coderai_gpu_")]
    with urllib.request.urlopen(url + "/healthz", timeout=10) as answer:
        health = json.loads(answer.read())
    return {"metrics": gpu, "healthz_engines": health.get("engines")}


def eos_bias(path: str, carried: Path) -> dict[str, float]:
    """A model may end early (a random one at once): its end-of-text tokens are banned, so
    each stream runs to max_tokens and the levels compare like with like."""
    folder = carried / "smollm2" if path.endswith(".gguf") else Path(path)
    config = json.loads((folder / "config.json").read_text())
    eos = config.get("eos_token_id")
    ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
    return {str(i): -100.0 for i in ids}


def gpu_tests(out: Path, seconds: float) -> dict[str, Any]:
    """The tests marked gpu. The project's pytest settings name plugins (pytest-timeout)
    the machine may lack: an unknown setting is a warning there, not an error."""
    xml = out / "gpu-tests.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q",
                           "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestConfigWarning",
                           f"--junitxml={xml}"], cwd=REPO, capture_output=True, text=True,
                          timeout=seconds)  # fmt: skip
    import xml.etree.ElementTree as ET

    cases = []
    if xml.exists():
        for case in ET.parse(xml).iter("testcase"):
            outcome = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = child.tag
            cases.append({"test": case.get("name"), "outcome": outcome,
                          "seconds": float(case.get("time") or 0)})  # fmt: skip
    found = {"exit": done.returncode, "tests": cases, "tail": done.stdout[-1500:]}
    if done.returncode not in (0, 5):  # 5: none collected
        raise RuntimeError(f"pytest exited {done.returncode}: {done.stdout[-800:]}")
    return found


def summary(result: dict[str, Any]) -> str:
    device = (result.get("environment") or {}).get("device") or (
        "no GPU (dry run)" if result.get("dry_run") else "GPU not read"
    )
    lines = [f"CoderAI GPU check: {device}; SmolLM2: {result.get('smol_weights', '-')}"]
    for step in result["steps"]:
        said = step.get("error", step.get("why", ""))[:100]
        lines.append(f"  {step['name']:<14} {step['outcome']:<8} {step['seconds']:>7.1f} s  {said}")
    for row in result.get("levels") or []:
        lines.append(
            f"  {row['model']:<5} x{row['concurrency']:<3} {row['tokens_per_second']:>8.1f} tok/s"
            f"  TTFT {row['ttft_p50_ms']:>7.1f} ms  gap p50 {row['itl_p50_ms']:>6.2f} ms"
            f"  front {row['front_cpu_us_per_token']:>6.1f} us/token  errors {len(row['errors'])}"
            f"  short {row['short']}"
        )
    vram = result.get("vram") or {}
    after_unload = (result.get("unload") or {}).get("after_unload") or []
    for when, found in (("before", vram.get("before")), ("loaded", vram.get("after")),
                        ("unloaded", after_unload)):  # fmt: skip
        for card in found or []:
            if "error" in card:
                lines.append(f"  VRAM {when:<8} NVML: {card['error']}")
            else:
                lines.append(f"  VRAM {when:<8} card {card['index']}: {card['used_mib']} MiB used"
                             f" of {card['total_mib']}, {card['temp_c']} C")  # fmt: skip
    for case in (result.get("gpu_tests") or {}).get("tests", []):
        lines.append(f"  test {case['test']}: {case['outcome']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--carried", type=Path, default=REPO / ".gpu")
    out = Path(os.environ.get("OUT") or REPO / "bench/results/gpu")
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--dry-run", action="store_true",
                        help="no CUDA call (a machine without a GPU)")  # fmt: skip
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--budget", type=float, default=470, help="seconds in all")
    parser.add_argument(
        "--weights",
        type=Path,
        default=Path("/tmp/coderai-weights"),
        help="where earlier calls left SmolLM2's GGUF in halves",
    )
    parser.add_argument("--tiny-only", action="store_true",
                        help="the tiny model alone (test_gpu_check.py)")  # fmt: skip
    args = parser.parse_args()
    check = Check(args.out, args.budget)
    work = Path(tempfile.mkdtemp(prefix="coderai-gpu-"))
    try:
        run(args, check, work)
    except BaseException as exc:  # recorded, then raised: the JSON says where it stopped
        check.result["crashed"] = f"{exc.__class__.__name__}: {exc}"
        raise
    finally:
        check.result["seconds"] = round(time.monotonic() - check.started, 1)
        check.save()
        print(summary(check.result))
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, check: Check, work: Path) -> None:
    result = check.result
    dry = args.dry_run
    result["dry_run"] = dry
    result["wheels"] = check.step("wheels", lambda: install(args.carried))
    result["environment"] = check.step("environment", lambda: environment(dry))
    result["nvml"] = check.step("nvml", cards)
    made = check.step("models", lambda: models(work, args.carried, args.weights, args.tiny_only))
    paths: dict[str, str] = made or {}
    real = paths.get("smol", "").endswith(".gguf")
    result["smol_weights"] = (
        "SmolLM2-135M-Instruct Q4_1 (transformers dequantizes it)"
        if real
        else "random, in SmolLM2-135M's shape, with its tokenizer"
    )
    dtype = "float32" if dry else "bfloat16"
    entries = [entry(name, path, dtype) for name, path in paths.items()]
    srv: Any = None

    def start() -> dict[str, Any]:
        nonlocal srv
        from tests.support.server import Server

        srv = Server(work / "server", {"heartbeat_interval": 0.5}, entries,
                     extra_config={"auth": {"admin_key": ADMIN}})  # fmt: skip
        srv.wait_ready(1, timeout=check.within(120))
        return {"engines": _admin(srv.url, "engines")["engines"]}

    try:
        result["server"] = check.step("server", start, None if paths else "no models")
        down = None if result["server"] is not None else "no server"
        url = srv.url if srv is not None else ""
        names = list(paths)
        result["vram"] = check.step("load", lambda: load(url, names, check.within, not dry), down)
        concurrencies = [int(n) for n in args.levels.split(",")]
        rows: list[dict[str, Any]] = []
        result["levels"] = rows
        for name in names:

            def stream(name: str = name) -> list[dict[str, Any]]:
                from bench.lib.gpu_load import levels

                engines = [int(e["pid"]) for e in srv.health()["engines"] if "pid" in e]
                deadline = time.monotonic() + check.within(150)
                found = levels(url, name, concurrencies, args.tokens, srv.proc.pid, engines,
                               eos_bias(paths[name], args.carried), deadline)  # fmt: skip
                rows.extend(found)
                return found

            check.step(f"stream-{name}", stream, None if result["vram"] else "not loaded")
        result["readings"] = check.step("readings", lambda: readings(url), down)
        result["unload"] = check.step(
            "unload", lambda: unload(url, names, check.within, not dry), down
        )
    finally:
        if srv is not None:
            result["server_log_tail"] = srv.log()[-3000:]
            srv.stop()
    result["gpu_tests"] = check.step("gpu-tests", lambda: gpu_tests(args.out, check.within(240)))


if __name__ == "__main__":
    main()
