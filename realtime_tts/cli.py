"""Command line: `realtime-tts serve` with one flag per config field (generated from config.field_docs()).

Precedence: defaults ← REALTIME_TTS_* env vars ← flags. Imports api lazily so `--help` stays instant.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from realtime_tts import config as config_mod


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="realtime-tts", description="Realtime text-to-speech server.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP/WebSocket server",
                           description=f"Start the server. Every flag also reads {config_mod.ENV_PREFIX}<FIELD> "
                                       "from the environment; flags win.")
    for section, name, default, doc in config_mod.field_docs():
        flag = "--" + name.replace("_", "-")
        help_text = f"{doc} [{section}; env {config_mod.ENV_PREFIX}{name.upper()}; default: {default}]"
        serve.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        overrides = {k: v for k, v in vars(args).items() if k != "command"}
        try:
            cfg = config_mod.load_config(overrides)
        except config_mod.ConfigError as e:
            print(f"realtime-tts: {e}", file=sys.stderr)
            return 2
        return serve(cfg)
    return 2


def serve(cfg: config_mod.Config) -> int:
    import uvicorn

    from realtime_tts.api import create_app

    logging.basicConfig(level=cfg.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(cfg), host=cfg.server.host, port=cfg.server.port, log_level=cfg.server.log_level,
                # 16x the app's frame limit: frames between the two get the app's error frame before the 1009
                # close (api/simple_ws); only larger ones are cut by the protocol layer itself
                ws_max_size=16 * cfg.server.max_ws_message_bytes, lifespan="on",
                # PCM barely compresses: per-message deflate only burned a fifth of the event loop's time
                ws_per_message_deflate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
