"""OmniVoice text rules (realtime_tts.omnivoice_text) against the reference's own functions."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from realtime_tts import omnivoice_text as ovt
from realtime_tts.errors import BadRequest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ref_model = pytest.importorskip("omnivoice.models.omnivoice")
from omnivoice.utils.duration import RuleDurationEstimator
from omnivoice.utils.lang_map import LANG_IDS, LANG_NAME_TO_ID

VALID_INSTRUCTS = [
    "female", "Male, young adult, low pitch", " male ,  british accent ", "女，青年，四川话", "female,河南话",
    "whisper, elderly", "male，high pitch", "child, very high pitch, american accent", ",female,", "",
    "MIDDLE-AGED, Moderate Pitch",
]
BAD_INSTRUCTS = ["femle", "male, female", "british accent, 四川话", "low pitch, high pitch", "robot voice",
                 "male, teenager, child"]
TEXTS = ["Hello world.", "你好世界", ""]


def test_language_table_matches_reference() -> None:
    assert ovt.LANGUAGE_IDS == LANG_IDS
    assert ovt.LANGUAGE_NAME_TO_ID == LANG_NAME_TO_ID
    assert len(ovt.LANGUAGE_IDS) == 646


@pytest.mark.parametrize("value", [None, "None", "none", "en", "EN", "English", "english", "zh", "Chinese",
                                   "Mandarin Chinese", "ja", "Klingon", "yue", "cmn", "Cantonese", ""])
def test_language_resolution_matches_reference(value: str | None) -> None:
    assert ovt.resolve_language(value) == ref_model._resolve_language(value)


def test_every_language_id_and_name_resolves_like_reference() -> None:
    for name, code in LANG_NAME_TO_ID.items():
        for v in (name, name.title(), code):
            assert ovt.resolve_language(v) == ref_model._resolve_language(v)


@pytest.mark.parametrize("instruct", VALID_INSTRUCTS)
@pytest.mark.parametrize("text", TEXTS)
def test_valid_instruct_normalised_like_reference(instruct: str, text: str) -> None:
    use_zh = bool(text and ref_model._ZH_RE.search(text))
    assert ovt.normalize_instruct(instruct, text) == ref_model._resolve_instruct(instruct, use_zh=use_zh)


@pytest.mark.parametrize("instruct", BAD_INSTRUCTS)
def test_invalid_instruct_is_a_bad_request_naming_the_field(instruct: str) -> None:
    with pytest.raises(ValueError):
        ref_model._resolve_instruct(instruct)
    with pytest.raises(BadRequest) as err:
        ovt.normalize_instruct(instruct, "Hello")
    assert err.value.field == "instruct" and err.value.status == 400
    assert "instruct" in err.value.message
    if instruct == "femle":
        assert "did you mean 'female'" in err.value.message
    if instruct in ("femle", "robot voice", "male, female"):
        assert "british accent" in err.value.message and "moderate pitch" in err.value.message  # allowed values


ESTIMATE_TEXTS = [
    "Hello world, how are you today?", "Hi.", "你好，世界！今天天气怎么样？", "こんにちは、カタカナ", "안녕하세요 여러분",
    "नमस्ते दुनिया", "مَرْحَبًا بِالْعَالَم", "Chào thế giới", "Hello 🌍! This is fun 🎉", "1234 5678, 90%",
    "Привет, мир. Ελληνικά.", "ሰላም ዓለም", "สวัสดีครับ", "A" * 400, "𠀀𠀁 ext-B", "\u0640\u0301 \t\n",
]


@pytest.mark.parametrize("text", ESTIMATE_TEXTS)
def test_weights_and_estimates_match_reference(text: str) -> None:
    est = RuleDurationEstimator()
    assert ovt.text_weight(text) == est.calculate_total_weight(text)
    model = ref_model.OmniVoice.__new__(ref_model.OmniVoice)
    model.duration_estimator = est
    for ref_text, ref_frames in [(None, None), ("A reference sentence.", 77), ("参考文本", 40), ("", 10)]:
        for speed in (1.0, 1.7, 0.6):
            assert ovt.estimate_frames(text, ref_text, ref_frames, speed) == \
                ref_model.OmniVoice._estimate_target_tokens(model, text, ref_text, ref_frames, speed=speed)


def test_duration_overrides_estimate() -> None:
    assert ovt.target_frames("anything", duration_s=2.2) == 55
    assert ovt.target_frames("anything", duration_s=0.01) == 1
    assert ovt.target_frames("Hello world", speed=2.0) == ovt.estimate_frames("Hello world", speed=2.0)


@pytest.mark.parametrize("text,ref", [("Hello\nworld\r\n", None), ("  a\t\t b  ", "Ref  text "),
                                      ("中文 text 混合 （括号）", "参考 文本"), ("x", "")])
def test_clean_text_matches_reference(text: str, ref: str | None) -> None:
    assert ovt.clean_text(text, ref) == ref_model._combine_text(text, ref)


def test_nonverbal_tags_split_alone() -> None:
    assert ovt.split_nonverbal("a[laughter]b [sigh][question-en] c[unknown]") == \
        ["a", "[laughter]", "b ", "[sigh]", "[question-en]", " c[unknown]"]
    assert ovt.split_nonverbal("[surprise-wa]") == ["[surprise-wa]"]


def test_end_punctuation_matches_reference() -> None:
    from omnivoice.utils.text import add_punctuation

    for t in ["Hello", "Hello.", "你好", "你好。", "quoted'", "  spaced  ", "", "wait…"]:
        assert ovt.end_with_punctuation(t) == add_punctuation(t)


def test_web_process_can_import_without_torch() -> None:
    code = ("import sys, realtime_tts.omnivoice_text as t; t.normalize_instruct('female'); "
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True)
