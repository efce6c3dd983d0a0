"""--model takes a model-hub id: resolved through huggingface_hub's cache with HF_HUB_OFFLINE=1, from a cache this
test fills in the hub's documented layout (models--<org>--<name>/refs/main -> snapshots/<commit>/...), so no
network is touched. Also: a local directory still works, and a hub id missing offline is a clear error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from live_server import REPO, start_server, stop_server

REPO_ID = "testorg/tiny-omnivoice"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hf_env(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / ("models--" + REPO_ID.replace("/", "--"))
    shutil.copytree(tiny_checkpoint, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "REALTIME_TTS_CONFIG": ""}


def check(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "realtime_tts.cli", "check", "--json", *args], cwd=REPO,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False)


def test_check_resolves_a_hub_id_from_the_cache_offline(hf_env: dict[str, str], tiny_checkpoint: Path) -> None:
    out = check("--model", REPO_ID, "--device", "cpu", env=hf_env)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    model = report["model"]
    assert model["hub_id"] == REPO_ID and model["status"] == "ok"
    assert Path(model["path"]) == Path(hf_env["HF_HUB_CACHE"]) / "models--testorg--tiny-omnivoice" / "snapshots" / COMMIT
    assert model["params"] > 0 and model["estimate_bytes"]["total"] > model["estimate_bytes"]["weights"]
    assert report["capabilities"]["omnivoice"]["model"] == "tiny-omnivoice"
    assert report["default_engine"] == "omnivoice" and report["cpu_voice"]["status"] == "ok"
    local = json.loads(check("--model", str(tiny_checkpoint), "--device", "cpu", env=hf_env).stdout)["model"]
    assert local["hub_id"] is None and local["params"] == model["params"]  # a directory works the same


def test_a_hub_id_missing_offline_is_a_clear_error(hf_env: dict[str, str]) -> None:
    out = check("--model", "testorg/absent", env=hf_env)
    assert out.returncode == 1
    problems = json.loads(out.stdout)["problems"]
    assert any("testorg/absent" in p and "not in the Hugging Face cache" in p for p in problems), problems
    out = check("--model", "/no/such/dir", env=hf_env)
    assert out.returncode == 1 and "does not exist" in out.stdout


def test_server_serves_a_hub_model_offline(hf_env: dict[str, str], tmp_path: Path) -> None:
    srv = start_server(tmp_path, "--model", REPO_ID, "--device", "cpu", "--cpu-workers", "1", env=hf_env,
                       timeout_s=300)
    try:
        models = {m["id"]: m for m in httpx.get(srv.http + "/v1/models").json()["data"]}
        assert models["tiny-omnivoice"]["loaded"] is True
        r = httpx.post(srv.http + "/v1/synth", json={"text": "Hi there.", "model": "omnivoice", "num_step": 2,
                                                     "duration": 0.4}, timeout=120)
        assert r.status_code == 200 and r.headers["content-type"] == "audio/wav" and len(r.content) > 44
    finally:
        stop_server(srv)
