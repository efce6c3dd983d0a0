"""`realtime-tts voices ls|add|rm`: the saved-voice library of a running server, through its HTTP API
(PROTOCOL.md §3: GET/POST /v1/voices, DELETE /v1/voices/{id}). Never touches the voice store's files: the
server owns them (and may keep them on shared storage for several replicas)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("voices", help="list, add or remove saved voices on a running server",
                       description="Manage a running server's saved voices (clone prompts) over its HTTP API.")
    p.add_argument("--server", default="http://127.0.0.1:8000", help="the server's base URL (default %(default)s)")
    p.add_argument("--api-key", default=None, help="sent as Authorization: Bearer <key> when the server wants one")
    p.add_argument("--json", action="store_true", help="print the server's JSON instead of a table")
    vs = p.add_subparsers(dest="voices_command", required=True)
    ls = vs.add_parser("ls", help="list saved voices")
    ls.set_defaults(run=run_ls)
    add = vs.add_parser("add", help="save a voice from a reference recording (or from a design instruct)")
    add.add_argument("name", help="the voice's name")
    add.add_argument("audio", nargs="?", type=Path, help="reference recording (wav/flac/ogg/mp3, 0.5-30 s)")
    add.add_argument("--ref-text", help="what the recording says (better clones; recommended)")
    add.add_argument("--from-design", metavar="INSTRUCT", help="instead of a recording: a voice description")
    add.add_argument("--language", help="the voice's language (e.g. en)")
    add.add_argument("--description", help="free text kept with the voice")
    add.add_argument("--seed", type=int, help="--from-design: the seed of the generated reference")
    add.add_argument("--model", help="the engine that encodes it (default: the server's cloning engine)")
    add.set_defaults(run=run_add)
    rm = vs.add_parser("rm", help="delete saved voices")
    rm.add_argument("voice_ids", nargs="+", metavar="VOICE_ID")
    rm.set_defaults(run=run_rm)


class _Failed(Exception):
    pass


def _call(args: argparse.Namespace, method: str, path: str, **kw: Any) -> Any:
    import httpx

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    url = args.server.rstrip("/") + path
    try:
        r = httpx.request(method, url, headers=headers, timeout=300, **kw)
    except httpx.HTTPError as e:
        raise _Failed(f"no answer from {args.server} ({type(e).__name__}: {e}); is a server running "
                      "(realtime-tts serve)? Another address: --server http://HOST:PORT") from None
    try:
        body = r.json()
    except ValueError:
        body = None
    if r.status_code == 404 and path == "/v1/voices":
        raise _Failed(f"{args.server} has no voices API (404 on {path})")
    if r.status_code >= 400:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        msg = err.get("message") if isinstance(err, dict) else None
        raise _Failed(f"{method} {path}: {r.status_code} {msg or r.text[:200]}")
    return body


def _main(fn: Any) -> Any:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except _Failed as e:
            print(f"realtime-tts: {e}", file=sys.stderr)
            return 1
    return wrapped


@_main
def run_ls(args: argparse.Namespace) -> int:
    voices = _call(args, "GET", "/v1/voices").get("data", [])
    if args.json:
        print(json.dumps(voices, indent=2))
        return 0
    if not voices:
        print("no saved voices")
        return 0
    print(f"{'VOICE_ID':<26} {'NAME':<24} {'LANG':<5} {'SECONDS':>7}  SOURCE")
    for v in voices:
        print(f"{v.get('voice_id', ''):<26} {str(v.get('name', ''))[:24]:<24} {v.get('language') or '-':<5} "
              f"{v.get('duration_s', 0):>7.1f}  {v.get('source', '')}")
    return 0


@_main
def run_add(args: argparse.Namespace) -> int:
    if (args.audio is None) == (args.from_design is None):
        raise _Failed("give a reference recording (AUDIO) or --from-design INSTRUCT, one of them")
    fields = {k: str(v) for k, v in {"name": args.name, "ref_text": args.ref_text, "language": args.language,
                                     "description": args.description, "from_design": args.from_design,
                                     "seed": args.seed}.items() if v is not None}
    params = {"model": args.model} if args.model else None
    if args.audio is not None:
        try:
            data = args.audio.read_bytes()
        except OSError as e:
            raise _Failed(f"cannot read {args.audio}: {e}") from None
        voice = _call(args, "POST", "/v1/voices", data=fields, files={"ref_audio": (args.audio.name, data)},
                      params=params)
    else:
        # multipart as the API documents it, with no file part
        voice = _call(args, "POST", "/v1/voices", files={k: (None, v) for k, v in fields.items()}, params=params)
    if args.json:
        print(json.dumps(voice, indent=2))
    else:
        print(f"saved {voice.get('voice_id')} ({voice.get('name')}, {voice.get('duration_s', 0):.1f} s)")
    return 0


@_main
def run_rm(args: argparse.Namespace) -> int:
    failed = 0
    for voice_id in args.voice_ids:
        try:
            _call(args, "DELETE", f"/v1/voices/{voice_id}")
            print(f"deleted {voice_id}")
        except _Failed as e:
            print(f"realtime-tts: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
