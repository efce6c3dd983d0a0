"""Command line: `realtime-tts <command>`; each command lives in its own module of this package.

A command module defines `register(sub)`: it adds its subparser to `sub` (argparse's subparsers action) and
sets `run=<function(args) -> exit code>` as the parser's default. Adding a command = one line in COMMANDS.
Modules are imported only to build the parser; each imports the heavy parts (api, uvicorn, httpx) inside its
run function, so `--help` stays instant and no command pulls in another's dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, in --help order (realtime_tts.cli.<name with _ for ->.register).
COMMANDS: list[str] = [
    "serve",
    "stop",
    "check",
    "install-service",
    "voices",
    "say",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="realtime-tts", description="Realtime text-to-speech server.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # e.g. serve --daemon starts the same command line again, in the background
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
