"""CURVE key files and the allow-list that `coderai cluster` edits and the front reads."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from coderai.bus import curve
from coderai.errors import ConfigError
from coderai.front.cluster.router import ClusterRouter


def test_the_server_pair_is_made_once_and_its_secret_is_private(tmp_path: Path) -> None:
    first = curve.server_pair(tmp_path)
    assert curve.server_pair(tmp_path) == first
    folder = tmp_path / "cluster"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "server.key_secret").stat().st_mode) == 0o600
    assert curve.load_public(folder / "server.key") == first[0]
    with pytest.raises(ConfigError, match="no secret key"):
        curve.load_pair(folder / "server.key")


def test_the_allow_list_names_keys_and_revokes_by_key_or_name(tmp_path: Path) -> None:
    allowed = curve.AllowList(tmp_path)
    a = curve.load_public(curve.create_pair(tmp_path, "a")[0]).decode()
    b = curve.load_public(curve.create_pair(tmp_path, "b")[0]).decode()
    allowed.allow(a, "alpha")
    allowed.allow(b, "beta")
    assert {k: e.name for k, e in allowed.read().items()} == {a: "alpha", b: "beta"}
    assert stat.S_IMODE(allowed.path.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="taken"):
        allowed.allow(a, "beta")
    assert allowed.revoke("beta").key == b
    assert allowed.revoke(a).name == "alpha"
    assert allowed.read() == {}
    with pytest.raises(ConfigError, match="no allowed key"):
        allowed.revoke("alpha")
    for bad in ("short", "x" * 41, a[:-1] + " ", a[:-1] + "~"):
        with pytest.raises(ConfigError, match="not a CURVE public key"):
            allowed.allow(bad, "bad")


def test_the_front_sees_a_change_of_the_list_and_the_keys_it_lost(tmp_path: Path) -> None:
    link = ClusterRouter(tmp_path, "tcp://127.0.0.1:0")
    key = curve.load_public(curve.create_pair(tmp_path, "a")[0])
    assert not link.callback("coderai", key)  # unknown
    curve.AllowList(tmp_path).allow(key.decode(), "a")
    assert link.callback("coderai", key)  # read again on the next handshake
    curve.AllowList(tmp_path).revoke("a")
    link.callback("coderai", b"0" * 40)  # any handshake reads the change first...
    assert key.decode() not in link.allowed  # ...and the revocation stands for everyone
    assert not link.callback("coderai", key)


def test_a_remote_routing_id_needs_its_random_part_and_a_local_one_none() -> None:
    from coderai.bus.messages import Hello
    from coderai.front.dispatch.admission import identity_matches

    hello = Hello("far", 7, 1, "cpu", ["fake"], 8, "", [])
    assert identity_matches(b"far:7", hello, remote=False)
    assert not identity_matches(b"far:7:0123456789abcdef", hello, remote=False)
    assert identity_matches(b"far:7:0123456789abcdef", hello, remote=True)
    for bad in (b"far:7", b"far:7:", b"far:7:short", b"far:8:0123456789abcdef",
                b"far:7:0123456789abcde!"):  # fmt: skip
        assert not identity_matches(bad, hello, remote=True), bad


def test_keygen_out_refuses_a_config_it_would_not_read(tmp_path: Path) -> None:
    from coderai.cli.main import main

    config = tmp_path / "config.json"
    config.write_text("{}")
    assert main(["cluster", "keygen", "--out", str(tmp_path / "k"), "--config", str(config)]) == 2
    assert not (tmp_path / "k.key_secret").exists()
    assert main(["cluster", "keygen", "--out", str(tmp_path / "k")]) == 0
    assert (tmp_path / "k.key_secret").exists()
