"""A remote engine over loopback TCP with CURVE, and a node (a whole `coderai run`
joined as one engine), against the same engine on ipc, in one run; and what CURVE costs
per message on a bare socket pair.

    python -m bench.cluster [--rounds 5] [--streams 1,8] [--tokens 256]

Part 1: one head with a local engine (ipc), a remote engine (`coderai engine --connect
tcp://127.0.0.1:…` with CURVE keys) and a node (`coderai run` with one engine and
`cluster.head` set), the same fake model pinned to each. For each stream count, rounds
alternate the three; per round: TTFT (request sent -> first content chunk) and tokens/s
(all streams' tokens over the round's wall time), medians over rounds. The fake model is
paced (--tokens-per-second, default 200 per stream), so each does the same work at the
same pace: what differs is the path (a node adds its own front's dispatcher and a relay).

Part 2: a DEALER sends --messages messages of 200 bytes to a ROUTER that echoes each one
(a round trip at a time), over ipc, tcp and tcp+CURVE, in this process: µs per round
trip, median of --rounds. What it does not show: a real network's latency (loopback
only), and CURVE's handshake (once per connection).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import zmq

from bench.lib.server import BenchServer, free_port
from tests.support.sse import is_content_delta

RESULTS = Path(__file__).resolve().parent / "results"
KEY = "bench-admin-key"
#: the engine each model is pinned to, and the path its requests take
PATHS = {
    "local": "ipc (local)",
    "far": "tcp + CURVE (remote engine)",
    "node": "tcp + CURVE (node: its front, then ipc)",
}


async def round_of(url: str, model: str, streams: int, tokens: int) -> dict[str, float]:
    body = {"model": model, "stream": True, "max_tokens": tokens,
            "messages": [{"role": "user", "content": "benchmark"}]}  # fmt: skip
    ttfts: list[float] = []

    async def one(session: aiohttp.ClientSession) -> None:
        sent = time.perf_counter()
        async with session.post(url + "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            first = True
            async for line in r.content:
                # content chunks only: not the role opening, not the final empty delta
                if first and is_content_delta(line):
                    ttfts.append(time.perf_counter() - sent)
                    first = False

    start = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(one(session) for _ in range(streams)))
    wall = time.perf_counter() - start
    return {"ttft_ms": statistics.median(ttfts) * 1e3, "tok_s": streams * tokens / wall}


def transports(args: argparse.Namespace) -> list[dict[str, Any]]:
    folder = Path(tempfile.mkdtemp(prefix="coderai-cluster-bench-"))
    bind = f"tcp://127.0.0.1:{free_port()}"
    options = {"tokens_per_second": args.tokens_per_second, "output_tokens": 1_000_000}
    models = [{"id": f"on-{n}", "format": "fake", "engine": n, "options": options}
              for n in PATHS]  # fmt: skip
    engines = [{"name": "local", "backend": "cpu", "capabilities": ["fake"]}]
    srv = BenchServer({"engine_specs": engines}, models, 1,
                      extra={"auth": {"admin_key": KEY}, "cluster": {"bind": bind}})  # fmt: skip
    config = str(srv.dir / "config.json")
    cli = [sys.executable, "-m", "coderai", "cluster"]
    subprocess.run([*cli, "keygen", "--out", str(folder / "far")], check=True,
                   capture_output=True)  # fmt: skip
    for name in ("far", "node"):
        if name == "node":
            subprocess.run([*cli, "keygen", "--out", str(folder / name)], check=True,
                           capture_output=True)  # fmt: skip
        subprocess.run([*cli, "allow", str(folder / f"{name}.key"), "--name", name,
                        "--config", config], check=True, capture_output=True)  # fmt: skip
    env = {**os.environ, "CODERAI_ENGINE_CAPABILITIES": "fake", "CODERAI_LOG_LEVEL": "WARNING"}
    remote = subprocess.Popen(
        [sys.executable, "-m", "coderai", "engine", "--name", "far", "--connect", bind,
         "--server-key", str(srv.dir / "cluster" / "server.key"),
         "--key", str(folder / "far.key_secret")], env=env,
    )  # fmt: skip
    head = {"head": bind, "head_key": str(srv.dir / "cluster" / "server.key"),
            "key": str(folder / "node.key_secret"), "name": "node"}  # fmt: skip
    node = BenchServer({"engine_specs": [{**engines[0], "name": "node-1"}]}, [], 1,
                       extra={"cluster": head})  # fmt: skip
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 30
        while not {"far", "node"} <= {e["name"] for e in srv.health()["engines"]}:
            if time.monotonic() > deadline:
                raise RuntimeError("the remote engine or the node did not join")
            time.sleep(0.1)
        for name in PATHS:  # load each model before timing
            asyncio.run(round_of(srv.url, f"on-{name}", 1, 4))
        for streams in args.streams:
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in PATHS}
            for _ in range(args.rounds):
                for name in PATHS:
                    result = asyncio.run(round_of(srv.url, f"on-{name}", streams, args.tokens))
                    rounds[name].append(result)
            for name, results in rounds.items():
                rows.append({
                    "transport": PATHS[name],
                    "streams": streams,
                    "ttft_ms": statistics.median(r["ttft_ms"] for r in results),
                    "tok_s": statistics.median(r["tok_s"] for r in results),
                })  # fmt: skip
    finally:
        remote.terminate()
        remote.wait(timeout=10)
        node.stop()
        srv.stop()
    return rows


def echo_cost(endpoint: str, curve: bool, messages: int) -> float:
    """µs per round trip of a 200-byte message between a DEALER and an echoing ROUTER."""
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    if curve:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        router.curve_server = True
        router.curve_secretkey = server_secret
        dealer.curve_serverkey = server_public
        dealer.curve_publickey, dealer.curve_secretkey = client_public, client_secret
    router.bind(endpoint)
    dealer.connect(router.getsockopt_string(zmq.LAST_ENDPOINT))
    payload = b"x" * 200
    dealer.send(payload)  # the handshake happens before timing
    router.send_multipart(router.recv_multipart())
    dealer.recv()
    start = time.perf_counter()
    for _ in range(messages):
        dealer.send(payload)
        router.send_multipart(router.recv_multipart())
        dealer.recv()
    elapsed = time.perf_counter() - start
    dealer.close(0)
    router.close(0)
    ctx.term()
    return elapsed / messages * 1e6


def message_costs(args: argparse.Namespace) -> list[dict[str, Any]]:
    folder = tempfile.mkdtemp(prefix="coderai-echo-")
    cases = [("ipc", f"ipc://{folder}/echo.sock", False), ("tcp", "tcp://127.0.0.1:*", False),
             ("tcp + CURVE", "tcp://127.0.0.1:*", True)]  # fmt: skip
    samples: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(args.rounds):
        for name, endpoint, curve in cases:
            samples[name].append(echo_cost(endpoint, curve, args.messages))
    return [{"transport": name, "us_per_round_trip": statistics.median(values)}
            for name, values in samples.items()]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 8])  # fmt: skip
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--tokens-per-second", type=float, default=200)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "cluster.json")
    args = parser.parse_args()
    costs = message_costs(args)
    rows = transports(args)
    args.out.write_text(json.dumps({"streams": rows, "echo": costs,
                                    "args": {k: v for k, v in vars(args).items() if k != "out"}},
                                   indent=2) + "\n")  # fmt: skip
    print("| transport | streams | TTFT ms (median) | tok/s (median) |\n|---|--:|--:|--:|")
    for r in rows:
        print(f"| {r['transport']} | {r['streams']} | {r['ttft_ms']:.2f} | {r['tok_s']:.0f} |")
    print("\n| bare socket pair | µs per 200-byte round trip (median) |\n|---|--:|")
    for c in costs:
        print(f"| {c['transport']} | {c['us_per_round_trip']:.1f} |")


if __name__ == "__main__":
    main()
