"""`coderai engine`: one engine process, started by the front's supervisor (`coderai run`)
rather than by hand. It imports none of the other commands' modules (main.py says why):
what it needs comes in its arguments and environment."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from coderai.errors import ConfigError

#: OpenMP's spin before a waiting thread sleeps (libgomp's GOMP_SPINCOUNT, iterations).
#: ggml ends each graph node with an OpenMP barrier, hundreds a token: a thread that sleeps
#: at each (a passive wait) is woken hundreds of times a token, and SmolLM2 decoded at
#: 63-68 tok/s through `coderai run` on 2 cores against 86-101 with this spin (measured,
#: 1 stream; 108 against 133 at 4). libgomp's default spin (300,000) is long enough to
#: keep spinning between steps while the front and clients want the same cores.
OPENMP_SPIN = "10000"


def brief_openmp_spin() -> None:
    """llama.cpp's (and torch's) OpenMP threads spin for a short while at a barrier, then
    sleep. libgomp's own default spin (300,000 turns) kept them spinning from one step to
    the next while the front and clients wanted the same cores: a 117-token SmolLM2 answer
    took 6-58 s instead of 1.3 s on 2 cores (measured). Never spinning makes every barrier
    inside a step a sleep and a wake (see OPENMP_SPIN). Set before llama.cpp or torch load
    their OpenMP runtime. An operator's own setting of either variable wins; an empty one is
    none (libgomp reads it as unset)."""
    if not any(os.environ.get(name, "").strip() for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN


def run(args: argparse.Namespace) -> int:
    # models are local files: a hub lookup would only stall (~46 s) and then fail
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    brief_openmp_spin()
    from coderai.engine.worker import EngineSettings, EngineWorker

    front_pid = os.environ.get("CODERAI_FRONT_PID")
    curve_keys = None
    if args.connect.startswith("tcp://"):
        if args.server_key is None or args.key is None:
            raise ConfigError("a tcp:// bus needs --server-key and --key (coderai cluster keygen)")
        from coderai.bus.curve import load_pair, load_public

        curve_keys = (load_public(args.server_key), *load_pair(args.key))
    capabilities = os.environ.get("CODERAI_ENGINE_CAPABILITIES", "")
    settings = EngineSettings(
        name=args.name,
        connect=args.connect,
        slots=args.slots,
        token=os.environ.get("CODERAI_BUS_TOKEN", ""),
        epoch=args.epoch if args.epoch is not None else int(time.time() * 1000),
        backend=os.environ.get("CODERAI_ENGINE_BACKEND", "cpu"),
        capabilities=[c for c in capabilities.split(",") if c],
        front_pid=int(front_pid) if front_pid else None,
        gpus=[g for g in os.environ.get("CODERAI_ENGINE_GPUS", "").split(",") if g],
        curve=curve_keys,
    )
    from coderai.engine.backends.llamacpp.repack import KERNELS, PREVIOUS_VARIABLE

    # the incarnation this one replaces died how? (a SIGILL with llama.cpp's extra buffer
    # types on heals: repack.py)
    KERNELS.after(os.environ.get(PREVIOUS_VARIABLE, ""))
    try:
        return asyncio.run(EngineWorker(settings).run())
    finally:
        KERNELS.close()


def add_arguments(engine: argparse.ArgumentParser) -> None:
    engine.add_argument("--name", required=True)
    engine.add_argument("--connect", required=True, help="the front's bus endpoint")
    engine.add_argument("--slots", type=int, default=8)
    engine.add_argument("--epoch", type=int, default=None)
    engine.add_argument(
        "--server-key", type=Path, help="the front's public key file (a tcp:// bus uses CURVE)"
    )
    engine.add_argument("--key", type=Path, help="this engine's secret key file (tcp://)")
