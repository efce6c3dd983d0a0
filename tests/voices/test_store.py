"""The voice store on disk: a round trip through a fresh store (a restart), atomic writes that leave no temp
file, ids that never name a path, damaged files skipped, and a second process's voice found on first use."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from realtime_tts.engine.base import VoicePrompt
from realtime_tts.errors import NotFound
from realtime_tts.voices.store import VoiceStore, valid_id

PROMPT = VoicePrompt("omnivoice", "A reference.", bytes(range(32)) * 5, 8, 10, 0.05, generated=False)


def test_round_trip_survives_a_new_store(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "v")
    saved = store.save(PROMPT, name="Ada", language="en", description="d")
    assert valid_id(saved.voice_id) and not list((tmp_path / "v").glob(".tmp-*"))
    assert oct((tmp_path / "v").stat().st_mode & 0o777) == "0o700"
    again = VoiceStore(tmp_path / "v").get(saved.voice_id)  # nothing cached: read from disk
    assert again.prompt == PROMPT and again.name == "Ada" and again.info() == saved.info()
    assert [v.voice_id for v in VoiceStore(tmp_path / "v").saved()] == [saved.voice_id]
    designed = store.save(dataclasses.replace(PROMPT, generated=True), name="d", source="design", seed=3)
    assert VoiceStore(tmp_path / "v").get(designed.voice_id).prompt.generated  # keeps its loudness rule


def test_ids_never_name_a_path(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "v")
    (tmp_path / "secret.json").write_text("{}")
    for bad in ("../secret", "voice_../../secret", "/etc/passwd", "voice_0123456789ABCDEF", "voice_0123", ""):
        with pytest.raises(NotFound):
            store.get(bad)
        with pytest.raises(NotFound):
            store.delete(bad)
    assert (tmp_path / "secret.json").exists()


def test_delete_and_damaged_files(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    one, two = store.save(PROMPT, name="one"), store.save(PROMPT, name="two")
    store.delete(one.voice_id)
    with pytest.raises(NotFound):
        store.get(one.voice_id)
    with pytest.raises(NotFound):
        store.delete(one.voice_id)
    (tmp_path / "voice_00000000000000ff.json").write_text("{not json")  # damaged: skipped, not fatal
    (tmp_path / "notes.json").write_text(json.dumps({"x": 1}))  # not a voice file name: ignored
    assert [v.voice_id for v in VoiceStore(tmp_path).saved()] == [two.voice_id]


def test_another_process_s_voice_is_found_its_delete_seen_and_crash_leftovers_go(tmp_path: Path) -> None:
    a, b = VoiceStore(tmp_path), VoiceStore(tmp_path)
    b.saved()  # b has looked before a saves
    saved = a.save(PROMPT, name="shared")
    assert b.get(saved.voice_id).prompt == PROMPT
    b.delete(saved.voice_id)
    with pytest.raises(NotFound):
        a.get(saved.voice_id)  # a had it in memory: the disk wins
    leftover = tmp_path / ".tmp-crashed.json"
    leftover.write_text("half")
    os.utime(leftover)
    VoiceStore(tmp_path).open()
    assert not leftover.exists()
