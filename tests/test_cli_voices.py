"""realtime-tts voices ls/add/rm against a real server (the tiny OmniVoice checkpoint on the CPU, so cloning
works), through the real CLI in subprocesses: the add/ls/rm round trip over the voices API (PROTOCOL.md §3),
and the CLI's clear messages for a server without that API and for no server at all."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_server import REPO, Server, start_server, stop_server


def voices_at(base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "realtime_tts.cli", "voices", "--server", base_url, *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def voices(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return voices_at(server.http, *args)


@pytest.fixture(scope="module")
def omni(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("voices-cli")
    srv = start_server(tmp, "--model", str(tiny_checkpoint), "--device", "cpu", "--cpu-workers", "1",
                       "--voices-dir", str(tmp / "voices"), timeout_s=300)
    yield srv
    stop_server(srv)


def test_ls_says_clearly_what_is_wrong(omni: Server) -> None:
    out = voices(omni, "ls")
    assert out.returncode == 0, out.stderr
    # a base URL under which nothing is routed stands for a server without the voices API: 404 on /v1/voices
    elsewhere = voices_at(omni.http + "/elsewhere", "ls")
    assert elsewhere.returncode == 1 and "has no voices API (404 on /v1/voices)" in elsewhere.stderr
    dead = voices(Server(1, omni.proc, omni.log_path), "ls")  # port 1: nothing listens
    assert dead.returncode == 1 and "is a server running" in dead.stderr


def test_add_ls_rm_round_trip(omni: Server, tmp_path: Path) -> None:
    ref = tmp_path / "ref.wav"
    r = httpx.post(omni.http + "/v1/synth", json={"text": "This is my reference voice, about two seconds.",
                                                  "model": "cpu"}, timeout=120)
    assert r.status_code == 200
    ref.write_bytes(r.content)
    added = voices(omni, "--json", "add", "Reference A", str(ref), "--ref-text",
                   "This is my reference voice, about two seconds.", "--language", "en")
    assert added.returncode == 0, added.stderr
    voice = json.loads(added.stdout)
    assert voice["name"] == "Reference A" and voice["duration_s"] > 0.5
    listed = voices(omni, "ls")
    assert listed.returncode == 0 and voice["voice_id"] in listed.stdout and "Reference A" in listed.stdout
    assert voices(omni, "rm", voice["voice_id"]).returncode == 0
    assert voice["voice_id"] not in voices(omni, "ls").stdout
    missing = voices(omni, "rm", voice["voice_id"])
    assert missing.returncode == 1 and "404" in missing.stderr
    bad = voices(omni, "add", "No audio")
    assert bad.returncode == 1 and "AUDIO" in bad.stderr
