"""Named presets: what each of OpenAI's voice names (and "custom" speakers) sounds like on every engine.

OmniVoice has no named speakers: a preset is a fixed voice-design instruct plus a fixed seed, so "alloy" is
the same voice on every request (a request seed still wins: another speaker of the same description). The
CPU voice maps each name to a voice of hibari's registry; the engine falls back to "heart" (inside the
wheel) with a warning where that voice is not installed. Leaf data: imports nothing from the package but
protocol's name list.
"""

from __future__ import annotations

from dataclasses import dataclass

from realtime_tts.protocol import OPENAI_VOICES


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    instruct: str  # OmniVoice voice design (omnivoice_text.normalize_instruct accepts it)
    seed: int  # OmniVoice: with the instruct, picks one speaker of that description
    hibari: str  # CPU voice: a name from hibari's registry (hibari.voices.VOICES)


# One row per OpenAI name; the gender matches the CPU voice it maps to.
_TABLE = (
    Preset("alloy", "female, young adult, moderate pitch, american accent", 1101, "heart"),
    Preset("ash", "male, young adult, low pitch, american accent", 1102, "fenrir"),
    Preset("ballad", "male, young adult, high pitch, british accent", 1103, "fable"),
    Preset("cedar", "male, middle-aged, low pitch, american accent", 1104, "fenrir"),
    Preset("coral", "female, young adult, high pitch, american accent", 1105, "kore"),
    Preset("echo", "male, young adult, moderate pitch, american accent", 1106, "fenrir"),
    Preset("fable", "male, middle-aged, moderate pitch, british accent", 1107, "fable"),
    Preset("marin", "female, young adult, moderate pitch, british accent", 1108, "emma"),
    Preset("nova", "female, teenager, high pitch, american accent", 1109, "heart"),
    Preset("onyx", "male, middle-aged, very low pitch, american accent", 1110, "fenrir"),
    Preset("sage", "female, middle-aged, low pitch, american accent", 1111, "emma"),
    Preset("shimmer", "female, middle-aged, moderate pitch, australian accent", 1112, "kore"),
    Preset("verse", "male, young adult, moderate pitch, australian accent", 1113, "fable"),
)
PRESETS: dict[str, Preset] = {p.name: p for p in _TABLE}
assert tuple(sorted(PRESETS)) == tuple(sorted(OPENAI_VOICES)), "one preset per OpenAI voice name"

# hibari's registry (hibari/assets/voices.json); heart is inside the wheel, the others download once.
HIBARI_VOICES = ("heart", "emma", "fenrir", "fable", "kore")
HIBARI_DEFAULT = "heart"


def hibari_voice(name: str | None) -> str:
    """The hibari voice a voice name asks for (before the installed check): a hibari name itself, an OpenAI
    name's preset, else the default."""
    if name is None:
        return HIBARI_DEFAULT
    key = name.lower()
    if key in HIBARI_VOICES:
        return key
    preset = PRESETS.get(key)
    return preset.hibari if preset is not None else HIBARI_DEFAULT
