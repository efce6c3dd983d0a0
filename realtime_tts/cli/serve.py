"""`realtime-tts serve`: run the HTTP/WebSocket server in the foreground."""

from __future__ import annotations

import argparse
import logging

from realtime_tts import config as config_mod
from realtime_tts.cli import options


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="start the HTTP/WebSocket server",
                       description=f"Start the server. Every flag also reads {config_mod.ENV_PREFIX}<FIELD> "
                                   "from the environment; flags win.")
    options.add_config_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cfg = options.load(args)
    if cfg is None:
        return 2
    return serve(cfg)


def serve(cfg: config_mod.Config) -> int:
    import uvicorn

    from realtime_tts.api import create_app

    logging.basicConfig(level=cfg.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(cfg), host=cfg.server.host, port=cfg.server.port, log_level=cfg.server.log_level,
                ws_max_size=cfg.server.max_ws_message_bytes, lifespan="on",
                # PCM barely compresses: per-message deflate only burned a fifth of the event loop's time
                ws_per_message_deflate=False)
    return 0
