"""Top-level test fixtures: one real server (uvicorn subprocess on a free port) and one tiny random OmniVoice
checkpoint, each shared by the session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from live_server import Server, start_server, stop_server

if not torch.cuda.is_available():
    # Without a GPU the Triton kernels run in Triton's interpreter. triton.jit reads this when a kernel is
    # decorated, i.e. when realtime_tts.gpu_worker.kernels is first imported, by whichever test module comes first:
    # so it is set here, before pytest imports any test module.
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    stop_server(srv)
    # The server must have survived every bad request the suite threw at it.
    assert "Traceback" not in srv.log(), srv.log()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random checkpoint in the released layout (the model, engine and gpu_worker tests share it; ~1 s
    to build)."""
    from realtime_tts.model.checkpoint import build_random_checkpoint  # torch: only when a test asks

    out = tmp_path_factory.mktemp("omnivoice-tiny")
    build_random_checkpoint(out, size="tiny", seed=0)
    return out


# The files that took longest in CI (the durations of session 11's runs), longest first. They are collected ahead of
# the rest so that pytest-xdist (`--dist loadfile`: a file at a time, in collection order) starts them early and a
# short file, not one of these, is the last thing each process runs.
_LONGEST_FIRST = (
    "gpu_worker/test_dac_units.py", "gpu_worker/test_precision.py", "test_nginx_replicas.py", "test_fuzz_routes.py",
    "engine/test_admission_api.py", "test_shutdown.py", "test_plugins.py", "gpu_worker/test_dac_decoder.py",
    "test_ws_slow_readers.py", "engine/test_client_faults.py", "test_session_machine.py",
    "engine/test_client_routing.py", "engine/test_api_omnivoice.py", "engine/test_voices_api.py",
    "test_unspeakable.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        try:
            return rank.get(item.path.relative_to(here).as_posix(), len(rank))
        except ValueError:  # collected from outside tests/
            return len(rank)

    items.sort(key=key)  # stable: every file keeps its tests' order, the others keep theirs
