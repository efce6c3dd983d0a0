"""Top-level test fixtures: one real server (uvicorn subprocess on a free port) shared by the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from live_server import Server, start_server, stop_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    stop_server(srv)
    # The server must have survived every bad request the suite threw at it.
    assert "Traceback" not in srv.log(), srv.log()
