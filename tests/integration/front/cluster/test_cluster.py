"""Engines on other machines join the bus over TCP with CURVE: an allowed key joins under
its name, is listed as remote and serves what is pinned to it; an unknown key never gets
past the handshake; a revoked key is cut off; a key used under another name is refused.
Real processes on loopback: the front, a local engine, and remote engines started by hand
as an operator would (`coderai engine --connect tcp://…`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, expected_chat, free_port, serving, wait_for
from tests.support.sse import BackgroundChat, content, events, is_error

KEY = "cluster-admin-key"
#: heartbeats: a remote engine starts over after 5 silent intervals (heartbeat_liveness)
INTERVAL = 0.5
ENGINES = [{"name": "local", "backend": "cpu", "capabilities": ["fake"]}]
MODELS: list[dict[str, Any]] = [
    {"id": "here", "format": "fake", "engine": "local"},
    {"id": "there", "format": "fake", "engine": "far"},
    {"id": "slow-there", "format": "fake", "engine": "far",
     "options": {"tokens_per_second": 20, "output_tokens": 10_000}},
    # its load takes long enough for a request to wait on it, never started
    {"id": "late-there", "format": "fake", "engine": "far", "options": {"load_seconds": 6}},
    # the same, pinned to a node (a whole `coderai run` joined as one engine)
    {"id": "slow-node", "format": "fake", "engine": "nodeb",
     "options": {"tokens_per_second": 20, "output_tokens": 10_000}},
    {"id": "late-node", "format": "fake", "engine": "nodeb", "options": {"load_seconds": 4}},
    {"id": "warm-node", "format": "fake", "engine": "nodeb"},
]  # fmt: skip
#: a node's own catalogue, which its head lists and routes to it
NODE_MODELS: list[dict[str, Any]] = [
    {"id": "node-model", "format": "fake", "options": {"output_tokens": 5}},
]


def in_netns(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] if netns else []


class Rig:
    def __init__(self, srv: Server, bind: str) -> None:
        self.srv, self.bind = srv, bind
        self.procs: list[subprocess.Popen[bytes]] = []
        self.nodes: list[Server] = []
        self.logs: list[Any] = []

    def cli(self, *args: str, head: bool = True) -> str:
        """`coderai cluster …`, against the head's config unless `head` is False."""
        config = ["--config", str(self.srv.workdir / "config.json")] if head else []
        done = subprocess.run(
            [sys.executable, "-m", "coderai", "cluster", *args, *config],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def keys(self, name: str) -> Path:
        """A new key pair for a remote engine: the secret key file."""
        out = self.srv.workdir / "keys" / name
        self.cli("keygen", "--out", str(out), head=False)
        return out.with_name(f"{name}.key_secret")

    def engine(self, name: str, secret: Path, netns: str | None = None,
               capabilities: str = "fake") -> subprocess.Popen[bytes]:  # fmt: skip
        log = open(self.srv.workdir / f"engine-{name}.log", "ab")  # noqa: SIM115
        self.logs.append(log)
        env = {**os.environ, "CODERAI_ENGINE_CAPABILITIES": capabilities}
        proc = subprocess.Popen(
            [*in_netns(netns), sys.executable, "-m", "coderai", "engine", "--name", name,
             "--connect", self.bind,
             "--server-key", str(self.srv.workdir / "cluster" / "server.key"),
             "--key", str(secret)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def join_far(self) -> subprocess.Popen[bytes]:
        """A key allowed as "far", and its engine once it has joined."""
        secret = self.keys("far")
        self.cli("allow", str(secret.with_name("far.key")), "--name", "far")
        proc = self.engine("far", secret)
        wait_for(lambda: "far" in self.engines())
        return proc

    def node(self, name: str, netns: str | None = None) -> Server:
        """A whole `coderai run` of its own (two engines, its own catalogue) that joins
        the head as `name`, once it has. In a network namespace, its own HTTP port is
        out of this test's reach: it is seen through the head only."""
        secret = self.keys(name)
        self.cli("allow", str(secret.with_name(f"{name}.key")), "--name", name)
        head = {"head": self.bind, "head_key": str(self.srv.workdir / "cluster" / "server.key"),
                "key": str(secret), "name": name}  # fmt: skip
        engines = [{"name": f"{name}-{i}", "backend": "cpu", "capabilities": ["fake"]}
                   for i in (1, 2)]  # fmt: skip
        config = {"engine_specs": engines, "heartbeat_interval": INTERVAL,
                  "max_parallel_requests": 3}  # fmt: skip
        argv = [*in_netns(netns), sys.executable, "-m", "coderai", "run"]
        node = Server(self.srv.workdir.parent / name, config, NODE_MODELS, argv=argv,
                      extra_config={"cluster": head, "auth": {"admin_key": KEY}})  # fmt: skip
        self.nodes.append(node)
        if netns is None:
            node.wait_ready(2)
        wait_for(lambda: name in self.engines(), timeout=30)
        return node

    def engines(self) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.srv.health()["engines"]}

    def close(self) -> None:
        """Every engine and node it started goes."""
        for proc in self.procs:
            proc.kill()
            proc.wait()
        for node in self.nodes:
            node.stop()
        for log in self.logs:
            log.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    bind = f"tcp://127.0.0.1:{free_port()}"
    config = {"engine_specs": ENGINES, "heartbeat_interval": INTERVAL}
    with serving(tmp_path / "head", config, MODELS, 1, KEY,
                 extra_config={"cluster": {"bind": bind}}) as srv:  # fmt: skip
        rig = Rig(srv, bind)
        try:
            yield rig
        finally:
            rig.close()


def chat(srv: Server, model: str) -> httpx.Response:
    body = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30)


def test_an_allowed_remote_engine_joins_and_serves_what_is_pinned_to_it(rig: Rig) -> None:
    secret = rig.keys("far")
    rig.cli("allow", str(secret.with_name("far.key")), "--name", "far")
    assert "far\t" in rig.cli("list")
    rig.engine("far", secret)
    wait_for(lambda: "far" in rig.engines())
    far = rig.engines()["far"]
    assert far["remote"] is True and far["state"] == "ready"
    assert rig.engines()["local"]["remote"] is False
    answer = chat(rig.srv, "there")
    assert answer.status_code == 200, answer.text
    wait_for(lambda: rig.engines()["far"]["loaded_models"] == ["there"])
    assert chat(rig.srv, "here").status_code == 200
    wait_for(lambda: rig.engines()["local"]["loaded_models"] == ["here"])


def test_an_unknown_key_never_gets_past_the_handshake(rig: Rig) -> None:
    rig.engine("stranger", rig.keys("stranger"))
    # its HELLO could only follow a handshake, which ZAP has refused
    wait_for(lambda: "unknown CURVE key" in rig.srv.log())
    assert set(rig.engines()) == {"local"}
    assert rig.srv.health()["dropped_bus_frames"] == 0  # refused before any frame


def test_a_revoked_key_is_cut_off(rig: Rig) -> None:
    proc = rig.join_far()
    rig.cli("revoke", "far")
    wait_for(lambda: "far" not in rig.engines())
    assert proc.wait(timeout=10) == 3  # told it was refused, it exits
    assert "its key was revoked" in rig.srv.log()
    # and it cannot come back
    seen = rig.srv.log().count("unknown CURVE key")
    rig.engine("far", rig.srv.workdir / "keys" / "far.key_secret")
    wait_for(lambda: rig.srv.log().count("unknown CURVE key") > seen)
    assert "far" not in rig.engines()


def test_a_key_joins_only_under_the_name_it_was_allowed_with(rig: Rig) -> None:
    def refused(allowed_as: str, joins_as: str) -> str:
        """What an engine with a key allowed under one name is told joining as another."""
        secret = rig.keys(f"key-{allowed_as}")
        rig.cli("allow", str(secret.with_name(f"key-{allowed_as}.key")), "--name", allowed_as)
        assert rig.engine(joins_as, secret).wait(timeout=20) == 3  # refused, it exits
        return (rig.srv.workdir / f"engine-{joins_as}.log").read_text()

    assert "this key joins as 'far', not 'elsewhere'" in refused("far", "elsewhere")
    # a key allowed under a local engine's name still never takes its place
    assert "the name 'local' is a local engine's" in refused("local", "local")
    assert rig.engines()["local"]["remote"] is False


def test_a_remote_engine_joins_again_after_the_head_restarts(rig: Rig) -> None:
    proc = rig.join_far()
    assert chat(rig.srv, "there").status_code == 200
    first_epoch = rig.engines()["far"]["epoch"]
    head = rig.srv
    head.stop()
    # the same folder (keys, allow-list) and the same bus endpoint, as a restart would
    config = {"engine_specs": ENGINES, "heartbeat_interval": INTERVAL}
    with serving(head.workdir, config, MODELS, 1, KEY,
                 extra_config={"cluster": {"bind": rig.bind}}) as again:  # fmt: skip
        rig.srv = again
        # silent for the liveness the old head set (5 x INTERVAL), then a new incarnation
        wait_for(lambda: "far" in rig.engines(), timeout=30)
        far = rig.engines()["far"]
        assert far["remote"] is True and far["epoch"] != first_epoch
        answer = chat(again, "there")
        assert answer.status_code == 200, answer.text
        assert proc.poll() is None  # the same process: it was never restarted
    told = (head.workdir / "engine-far.log").read_text()
    assert "engine far starts over" in told


def test_a_remote_engine_that_goes_silent_mid_stream_errors_it_and_joins_again(
    rig: Rig,
) -> None:
    proc = rig.join_far()
    first_epoch = rig.engines()["far"]["epoch"]
    generating = BackgroundChat(rig.srv.url, "slow-there")
    events = generating.events
    wait_for(lambda: len(events) > 3)
    proc.send_signal(signal.SIGSTOP)  # a machine that stops answering (a network cut)
    try:
        # lost after heartbeat_liveness (5) x INTERVAL of silence: the started stream errors
        wait_for(lambda: any(is_error(e) for e in events), timeout=10)
        wait_for(lambda: "far" not in rig.engines())
    finally:
        proc.send_signal(signal.SIGCONT)
    generating.thread.join(timeout=10)
    # back, it finds its front silent for longer than the liveness and joins again
    wait_for(lambda: "far" in rig.engines() and rig.engines()["far"]["epoch"] != first_epoch,
             timeout=30)  # fmt: skip
    assert chat(rig.srv, "there").status_code == 200


def test_a_killed_remote_engine_errors_its_stream_within_3_s_and_reruns_the_unstarted(
    rig: Rig,
) -> None:
    proc = rig.join_far()
    events = BackgroundChat(rig.srv.url, "slow-there").events
    wait_for(lambda: len(events) > 3)  # streaming before the other load takes the loader
    waiting: list[httpx.Response] = []
    later = threading.Thread(target=lambda: waiting.append(chat(rig.srv, "late-there")))
    later.start()
    # killed while most of that load is still to come (heartbeats report it 0.5 s late):
    # the request is certain not to have started there
    wait_for(lambda: rig.engines()["far"]["loading"].get("late-there", 1.0) < 0.5)
    killed = time.monotonic()
    proc.kill()
    # the next keepalive PING finds the peer gone (ROUTER_MANDATORY): lost at once, not
    # after heartbeat_liveness intervals of silence
    wait_for(lambda: any(is_error(e) for e in events), timeout=10)
    assert time.monotonic() - killed < 3
    later.join(timeout=30)
    # the request that had not started ran on the local engine (its pin's engine is gone)
    assert waiting and waiting[0].status_code == 200, waiting
    wait_for(lambda: "late-there" in rig.engines()["local"]["loaded_models"])


def test_restarting_a_remote_engine_asks_it_to_join_again(rig: Rig) -> None:
    proc = rig.join_far()
    assert chat(rig.srv, "there").status_code == 200
    first_epoch = rig.engines()["far"]["epoch"]
    answer = httpx.post(rig.srv.url + "/admin/api/engines/far/restart",
                        headers={"Authorization": f"Bearer {KEY}"}, timeout=30)  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "reconnecting"
    # the same process, a new incarnation, serving (not left draining)
    wait_for(lambda: rig.engines().get("far", {}).get("epoch") not in (None, first_epoch))
    assert rig.engines()["far"]["state"] == "ready"
    assert proc.poll() is None
    assert chat(rig.srv, "there").status_code == 200
    wait_for(lambda: rig.engines()["far"]["loaded_models"] == ["there"])


def test_a_node_joins_as_one_engine_and_serves_the_heads_requests_and_its_own(
    rig: Rig,
) -> None:
    node = rig.node("nodeb")
    view = rig.engines()["nodeb"]
    # one engine to the head: its two engines' slots summed, their capabilities joined
    assert (view["remote"], view["backend"], view["slots"]) == (True, "node", 6)
    assert view["capabilities"] == ["fake"]
    # its own models are listed by the head and served through it, by the node's engines
    listed = httpx.get(rig.srv.url + "/v1/models", timeout=10).json()["data"]
    assert "node-model" in [m["id"] for m in listed]
    body = {"model": "node-model", "messages": [{"role": "user", "content": "x"}]}
    answer = httpx.post(rig.srv.url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-CoderAI-Engine"] == "nodeb"
    assert answer.json()["choices"][0]["message"]["content"] == expected_chat("x", 5)
    # streamed through the node, every token in order
    many = {**body, "stream": True, "max_tokens": 400}
    answer = httpx.post(rig.srv.url + "/v1/chat/completions", json=many, timeout=30)
    assert content(events(answer.content)) == expected_chat("x", 5)
    # a model of the head's catalogue pinned to the node, streamed through it
    streamed = BackgroundChat(rig.srv.url, "slow-node")
    wait_for(lambda: len(streamed.events) > 3)
    streamed.stop()
    # the node keeps serving its own clients
    local = httpx.post(node.url + "/v1/chat/completions", json=body, timeout=30)
    assert local.status_code == 200 and local.headers["X-CoderAI-Engine"] in ("nodeb-1", "nodeb-2")
    headers = {"Authorization": f"Bearer {KEY}"}
    uplink = httpx.get(node.url + "/admin/api/status", headers=headers, timeout=10).json()["uplink"]
    assert uplink["state"] == "joined" and uplink["relayed"] >= 1
    # what the node ran for the head is its own engines' work, and freed when done
    wait_for(lambda: rig.engines()["nodeb"]["in_flight"] == 0)
    wait_for(lambda: all(e["in_flight"] == 0 for e in node.health()["engines"]))
    wait_for(lambda: "node-model" in rig.engines()["nodeb"]["loaded_models"])
    # the head's admin load of a model pinned to the node: one of the node's engines loads it
    loaded = httpx.post(rig.srv.url + "/admin/api/models/warm-node/load", headers=headers,
                        timeout=10)  # fmt: skip
    assert loaded.status_code == 202, loaded.text
    wait_for(lambda: "warm-node" in rig.engines()["nodeb"]["loaded_models"])


def test_a_killed_node_errors_its_stream_within_3_s_and_reruns_the_unstarted(
    rig: Rig,
) -> None:
    node = rig.node("nodeb")
    events = BackgroundChat(rig.srv.url, "slow-node").events
    wait_for(lambda: len(events) > 3)
    waiting: list[httpx.Response] = []
    later = threading.Thread(target=lambda: waiting.append(chat(rig.srv, "late-node")))
    later.start()
    wait_for(lambda: rig.engines()["nodeb"]["loading"].get("late-node", 1.0) < 0.5)
    killed = time.monotonic()
    node.proc.kill()  # the node's front; its engines follow it out
    wait_for(lambda: any(is_error(e) for e in events), timeout=10)
    assert time.monotonic() - killed < 3
    later.join(timeout=30)
    assert waiting and waiting[0].status_code == 200, waiting
    assert waiting[0].headers["X-CoderAI-Engine"] == "local"
    assert "nodeb" not in rig.engines() and "node-model" not in [
        m["id"] for m in httpx.get(rig.srv.url + "/v1/models", timeout=10).json()["data"]
    ]


class Namespaces:
    """Network namespaces, each joined to this one by a veth pair (this side .1, theirs
    .2 of 10.77.N.0/24), for peers that reach the head only over a network."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def add(self, name: str) -> str:
        """A namespace; the head's address as it sees it."""
        n = len(self.names) + 1
        ns = f"coderai-test-{os.getpid()}-{n}"
        here, there = f"cai{os.getpid() % 10000}h{n}", f"cai{os.getpid() % 10000}t{n}"
        self._ip("netns", "add", ns)
        self.names.append(ns)
        self._ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        self._ip("addr", "add", f"10.77.{n}.1/24", "dev", here)
        self._ip("link", "set", here, "up")
        self._ip("-n", ns, "addr", "add", f"10.77.{n}.2/24", "dev", there)
        self._ip("-n", ns, "link", "set", there, "up")
        self._ip("-n", ns, "link", "set", "lo", "up")
        return f"10.77.{n}.1"

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    def close(self) -> None:
        for ns in self.names:  # its end of each veth pair goes with it, and so this end
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    spaces = Namespaces()
    try:
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root")
        try:
            spaces.add("probe")
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"this machine cannot make network namespaces: {exc}")
        yield spaces
    finally:
        spaces.close()


def test_a_remote_engine_and_a_node_in_their_own_network_namespaces_join_and_serve(
    tmp_path: Path, namespaces: Namespaces
) -> None:
    port = free_port()
    config = {"engine_specs": ENGINES, "heartbeat_interval": INTERVAL}
    # the head listens on every address: its peers reach it over their veth links only
    with serving(tmp_path / "head", config, MODELS, 1, KEY,
                 extra_config={"cluster": {"bind": f"tcp://0.0.0.0:{port}"}}) as srv:  # fmt: skip
        rig = Rig(srv, "")
        far_ns, far_head = namespaces.names[0], "10.77.1.1"  # the fixture's probe
        node_head = namespaces.add("node")
        node_ns = namespaces.names[1]
        try:
            secret = rig.keys("far")
            rig.cli("allow", str(secret.with_name("far.key")), "--name", "far")
            rig.bind = f"tcp://{far_head}:{port}"
            far = rig.engine("far", secret, netns=far_ns)
            wait_for(lambda: "far" in rig.engines(), timeout=30)
            rig.bind = f"tcp://{node_head}:{port}"
            rig.node("nodeb", netns=node_ns)
            answer = chat(srv, "there")
            assert answer.status_code == 200 and answer.headers["X-CoderAI-Engine"] == "far"
            body = {"model": "node-model", "messages": [{"role": "user", "content": "x"}]}
            answer = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30)
            assert answer.status_code == 200 and answer.headers["X-CoderAI-Engine"] == "nodeb"
            assert far.poll() is None
        finally:
            for proc in rig.procs:
                proc.kill()
                proc.wait()
            for node in rig.nodes:
                node.stop()  # SIGTERM: it stops its own engines
            for log in rig.logs:
                log.close()


def test_a_second_process_with_a_joined_key_is_refused_and_the_first_keeps_serving(
    rig: Rig,
) -> None:
    rig.join_far()
    first = rig.engines()["far"]["pid"]
    twin = rig.engine("far", rig.srv.workdir / "keys" / "far.key_secret")
    assert twin.wait(timeout=20) == 3  # refused, it exits; it never took the name
    assert "is the key used twice?" in (rig.srv.workdir / "engine-far.log").read_text()
    assert rig.engines()["far"]["pid"] == first
    assert chat(rig.srv, "there").status_code == 200
