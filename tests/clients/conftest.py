"""The client tests: the client package (clients/python) is importable here and in the processes they start,
installed or not (a checkout's tests run it from source)."""

from __future__ import annotations

import os
import sys

from live_server import REPO

CLIENT_SRC = str(REPO / "clients" / "python")
if CLIENT_SRC not in sys.path:
    sys.path.insert(0, CLIENT_SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO), CLIENT_SRC, os.environ.get("PYTHONPATH", "")) if p)
