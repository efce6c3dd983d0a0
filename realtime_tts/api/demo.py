"""GET /demo: the browser demo page (static files in realtime_tts/web/, shipped inside the package).

Owns only the routes that serve those files; the page itself speaks the public protocol (WS /v1/stream/text,
GET /v1/voices, GET /v1/models) like any other client. Imports Starlette only.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

WEB = Path(__file__).resolve().parents[1] / "web"


async def page(request: Request) -> Response:
    return FileResponse(WEB / "demo.html", media_type="text/html; charset=utf-8")


def routes() -> list[BaseRoute]:
    """/demo (the page) and /demo/<file> (its script)."""
    return [Route("/demo", page), Mount("/demo", StaticFiles(directory=WEB))]
