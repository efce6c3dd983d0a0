"""The saved-voice library: encoded clone prompts (codes, ref_text, loudness) plus metadata, one JSON file per
voice under --voices-dir, written atomically (temp file in the same directory, fsync, rename).

Ids are made here (never taken from a request) and validated against a fixed pattern before any file name
is built from them, so nothing a client sends can name a path outside the store. Imports engine.base and
errors only; the file I/O is small (a voice is ~12 KB) but callers on the event loop use the async methods.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from realtime_tts.engine.base import VoicePrompt
from realtime_tts.errors import BadRequest, NotFound, PayloadTooLarge

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# "voice_" + 16 hex digits: 64 random bits, no separator, dot or slash can ever appear in a file name.
_ID_RE = re.compile(r"^voice_[0-9a-f]{16}$")
_SUFFIX = ".json"
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 1000
MAX_REF_TEXT_CHARS = 2000
MAX_VOICES = 10_000  # a bound on the directory (and on what saved() reads)
_CACHE_SIZE = 256  # decoded voices kept in memory (a hot voice is read from disk once)


def valid_id(voice_id: str) -> bool:
    return isinstance(voice_id, str) and _ID_RE.fullmatch(voice_id) is not None


def looks_like_id(name: str) -> bool:
    """A voice field that is meant as a saved voice (so an unknown one is a 404, not an unknown preset)."""
    return name.startswith("voice_")


@dataclass(frozen=True, slots=True)
class SavedVoice:
    """One voice of the library: its clone prompt and what the client said about it."""

    voice_id: str
    name: str
    prompt: VoicePrompt
    created_at: float  # unix seconds
    language: str | None = None
    description: str | None = None
    source: str = "upload"  # upload | design
    instruct: str | None = None  # from_design: the instruct its reference was generated with
    seed: int | None = None

    @property
    def duration_s(self) -> float:
        return self.prompt.num_frames / 25.0

    def info(self) -> dict[str, Any]:
        """The public description (GET /v1/voices): everything but the codes."""
        return {
            "voice_id": self.voice_id, "object": "voice", "name": self.name, "ref_text": self.prompt.ref_text,
            "language": self.language, "description": self.description, "source": self.source,
            "instruct": self.instruct, "seed": self.seed, "engine": self.prompt.engine,
            "duration_s": round(self.duration_s, 3), "created_at": int(self.created_at),
        }

    def to_json(self) -> dict[str, Any]:
        p = self.prompt
        return {"format_version": FORMAT_VERSION, **{k: v for k, v in self.info().items() if k != "object"},
                "created_at": self.created_at,
                "prompt": {**{k: v for k, v in asdict(p).items() if k not in ("codes", "key")},
                           "codes_b64": base64.b64encode(p.codes).decode("ascii")}}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SavedVoice:
        if obj.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unsupported voice format {obj.get('format_version')!r}")
        p = obj["prompt"]
        prompt = VoicePrompt(engine=str(p["engine"]), ref_text=str(p["ref_text"]),
                             codes=base64.b64decode(p["codes_b64"]), num_codebooks=int(p["num_codebooks"]),
                             num_frames=int(p["num_frames"]), ref_rms=float(p["ref_rms"]),
                             generated=bool(p.get("generated", False)))
        if len(prompt.codes) != 2 * prompt.num_codebooks * prompt.num_frames:
            raise ValueError("codes do not match their shape")
        return cls(voice_id=str(obj["voice_id"]), name=str(obj["name"]), prompt=prompt,
                   created_at=float(obj["created_at"]), language=obj.get("language"),
                   description=obj.get("description"), source=str(obj.get("source") or "upload"),
                   instruct=obj.get("instruct"), seed=obj.get("seed"))


def check_metadata(name: str | None, ref_text: str | None, language: str | None,
                   description: str | None) -> tuple[str, str]:
    """Validate the client's fields of a new voice → (name, ref_text). Messages name the field."""
    if name is None or not name.strip():
        raise BadRequest("name is required (a label for the voice)", field="name")
    if len(name) > MAX_NAME_CHARS:
        raise BadRequest(f"name has {len(name)} characters; at most {MAX_NAME_CHARS}", field="name")
    if ref_text is None or not ref_text.strip():
        raise BadRequest("ref_text (the transcript of the reference audio) is required", field="ref_text")
    if len(ref_text) > MAX_REF_TEXT_CHARS:
        raise BadRequest(f"ref_text has {len(ref_text)} characters; at most {MAX_REF_TEXT_CHARS}", field="ref_text")
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        raise BadRequest(f"description has {len(description)} characters; at most {MAX_DESCRIPTION_CHARS}",
                         field="description")
    if language is not None and len(language) > 64:
        raise BadRequest("language is too long (at most 64 characters)", field="language")
    return name.strip(), ref_text.strip()


class VoiceStore:
    """The library under one directory. Thread-safe; every method that touches the disk has an async twin
    that runs it on a thread (get is also called on the event loop by voice selection: a cache hit costs one
    stat, a miss one ~12 KB read). Several server processes may share one directory: a voice another process
    saved is found on first use, one it deleted is gone (the disk is the truth, the cache only saves reads)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(os.path.expanduser(str(root))).resolve()
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, SavedVoice] = OrderedDict()

    def _path(self, voice_id: str) -> Path:
        # The pattern admits only [a-z0-9_]: the file is always a direct child of root.
        if not valid_id(voice_id):
            raise NotFound(f"voice_id {voice_id[:80]!r} is not a saved voice id (they look like "
                           "voice_0123456789abcdef)", field="voice_id")
        return self.root / f"{voice_id}{_SUFFIX}"

    def open(self) -> None:
        """At start-up: drop temp files a crash left (the directory itself is made by the first save)."""
        if not self.root.is_dir():
            return
        for leftover in self.root.glob(".tmp-*"):
            try:
                leftover.unlink()
            except OSError:
                pass

    # -- sync API (threads) -----------------------------------------------------------------------------

    def save(self, prompt: VoicePrompt, *, name: str, language: str | None = None,
             description: str | None = None, source: str = "upload", instruct: str | None = None,
             seed: int | None = None) -> SavedVoice:
        if self.count() >= MAX_VOICES:
            raise PayloadTooLarge(f"the voice library is full ({MAX_VOICES} voices); delete some first",
                                  field="voice")
        voice = SavedVoice(voice_id=f"voice_{secrets.token_hex(8)}", name=name, prompt=prompt,
                           created_at=time.time(), language=language, description=description, source=source,
                           instruct=instruct, seed=seed)
        data = json.dumps(voice.to_json(), separators=(",", ":")).encode()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)  # 0700: the prompts are people's voices
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX, dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(voice.voice_id))  # atomic: readers see the old state or the whole file
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.root)
        with self._lock:
            self._remember(voice)
        return voice

    def get(self, voice_id: str) -> SavedVoice:
        path = self._path(voice_id)
        with self._lock:
            voice = self._cache.get(voice_id)
        if voice is not None:
            if path.is_file():  # one stat: a voice another process deleted is not served from memory
                with self._lock:
                    if voice_id in self._cache:
                        self._cache.move_to_end(voice_id)
                return voice
            with self._lock:
                self._cache.pop(voice_id, None)
        try:
            voice = SavedVoice.from_json(json.loads(path.read_bytes()))
        except FileNotFoundError:
            raise NotFound(f"voice_id {voice_id!r} not found (GET /v1/voices lists the saved voices)",
                           field="voice_id") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.error("saved voice %s is unreadable: %s", path, e)
            raise NotFound(f"voice_id {voice_id!r} is damaged on disk; delete and re-create it",
                           field="voice_id") from None
        with self._lock:
            self._remember(voice)
        return voice

    def delete(self, voice_id: str) -> None:
        path = self._path(voice_id)
        with self._lock:
            self._cache.pop(voice_id, None)
        try:
            path.unlink()
        except FileNotFoundError:
            raise NotFound(f"voice_id {voice_id!r} not found", field="voice_id") from None
        _fsync_dir(self.root)

    def saved(self) -> list[SavedVoice]:
        """Every readable voice, newest first (damaged files are logged and skipped)."""
        out = []
        for path in self._files():
            try:
                out.append(self.get(path.name[: -len(_SUFFIX)]))
            except NotFound:
                continue
        return sorted(out, key=lambda v: v.created_at, reverse=True)

    def count(self) -> int:
        return len(self._files())

    def _files(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if p.name.endswith(_SUFFIX) and valid_id(p.name[: -len(_SUFFIX)])]

    def _remember(self, voice: SavedVoice) -> None:
        self._cache[voice.voice_id] = voice
        self._cache.move_to_end(voice.voice_id)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    # -- async twins (the event loop never touches the disk) ---------------------------------------------

    async def aget(self, voice_id: str) -> SavedVoice:
        return await asyncio.to_thread(self.get, voice_id)

    async def asave(self, prompt: VoicePrompt, **kw: Any) -> SavedVoice:
        return await asyncio.to_thread(lambda: self.save(prompt, **kw))

    async def adelete(self, voice_id: str) -> None:
        await asyncio.to_thread(self.delete, voice_id)

    async def asaved(self) -> list[SavedVoice]:
        return await asyncio.to_thread(self.saved)


def _fsync_dir(path: Path) -> None:
    """Make a rename durable (the directory entry), where the OS allows opening a directory."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
