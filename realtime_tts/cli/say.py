"""`realtime-tts say`: the client package's `say` (clients/python, realtime_tts_client.cli), registered here.

The code lives in the client package, which imports no server code; this module only hooks it into the
server's command line. Without the client package installed the command says how to install it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    try:
        from realtime_tts_client import cli
    except ImportError:
        p = sub.add_parser("say", help="speak text through a running server (needs clients/python)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(run=_missing)
        return
    p = sub.add_parser("say", help="speak text through a running server (play it or write a WAV)",
                       description=cli.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.build_parser(p).set_defaults(run=cli.run)


def _missing(args: argparse.Namespace) -> int:
    print("realtime-tts say: the client package is not installed: pip install -e clients/python", file=sys.stderr)
    return 2
