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
