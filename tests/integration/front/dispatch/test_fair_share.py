"""Fair share between API keys at admission (front/dispatch/queue.py): one key that keeps
many requests queued does not hold back another key's single request by more than one
turn, through the real front and a one-slot fake engine."""

from __future__ import annotations

import threading

import httpx

from tests.integration.conftest import StartServer
from tests.support.server import Server, wait_for

ADMIN = "fair-admin-key"


def key(srv: Server, name: str) -> str:
    made = httpx.post(srv.url + "/admin/api/keys", json={"name": name},
                      headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)  # fmt: skip
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def test_a_single_request_waits_one_turn_behind_a_key_that_floods_the_queue(
    start_server: StartServer,
) -> None:
    # one sequence at a time, each answer 10 tokens at 25 a second (0.4 s)
    model = {"id": "solo", "format": "fake",
             "options": {"capacity": 1, "tokens_per_second": 25}}  # fmt: skip
    server = {"heartbeat_interval": 0.2, "max_parallel_requests": 1}  # the front queues
    srv = start_server(server, [model],
                       extra_config={"auth": {"admin_key": ADMIN}})  # fmt: skip
    flood, single = key(srv, "flood"), key(srv, "single")
    ended: list[str] = []
    lock = threading.Lock()

    def ask(secret: str, name: str) -> None:
        body = {"model": "solo", "prompt": "x", "max_tokens": 10}
        r = httpx.post(srv.url + "/v1/completions", json=body,
                       headers={"Authorization": f"Bearer {secret}"}, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        with lock:
            ended.append(name)

    threads = [threading.Thread(target=ask, args=(flood, f"a{i}")) for i in range(12)]
    for t in threads:
        t.start()
    wait_for(lambda: srv.health()["queued"] >= 10, 30)  # one runs, the rest wait
    queued = srv.health()["queued"]  # no more of the flood's than this wait when B comes
    late = threading.Thread(target=ask, args=(single, "b"))
    late.start()
    for t in [*threads, late]:
        t.join(60)
    assert len(ended) == 13
    # B went ahead of the flood's waiting requests but (at most) the one of its turn, and
    # the two that may have gone to the engine while B's request was on its way
    after = len(ended) - 1 - ended.index("b")
    assert queued >= 10 and after >= queued - 3, (queued, ended)
