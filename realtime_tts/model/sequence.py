"""Builds one item's conditioning sequence (style prefix, text, reference codes, masked target) and its
unmasking schedule. Text rules come from realtime_tts.omnivoice_text; torch only for the id tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from realtime_tts.errors import BadRequest
from realtime_tts.omnivoice_text import (
    clean_text,
    normalize_instruct,
    resolve_language,
    split_nonverbal,
    target_frames,
    validate_speed_duration,
)

if TYPE_CHECKING:
    from realtime_tts.model.codec import ClonePrompt
    from realtime_tts.model.network import OmniVoiceModel

MAX_STEPS = 256
MAX_FRAMES = 1500  # 60 s at 25 Hz: longer texts are split into sentences by the service before they get here


@dataclass(frozen=True)
class DecodeParams:
    """Sampling knobs of iterative masked decoding (defaults = the released generation config)."""

    num_step: int = 32
    guidance_scale: float = 2.0
    t_shift: float = 0.1
    layer_penalty: float = 5.0
    position_temperature: float = 5.0
    class_temperature: float = 0.0  # 0 = argmax tokens; > 0 = top-10% Gumbel sampling

    def validate(self) -> None:
        if not 1 <= self.num_step <= MAX_STEPS:
            raise BadRequest(f"num_step must be 1..{MAX_STEPS}, got {self.num_step}", field="num_step")
        if not 0.0 <= self.guidance_scale <= 20.0:
            raise BadRequest(f"guidance_scale must be 0..20, got {self.guidance_scale}", field="guidance_scale")
        if not 0.0 <= self.position_temperature <= 100.0:
            raise BadRequest(f"position_temperature must be 0..100, got {self.position_temperature}",
                             field="position_temperature")
        if not 0.0 <= self.class_temperature <= 100.0:
            raise BadRequest(f"temperature must be 0..100, got {self.class_temperature}", field="temperature")
        if not 0.0 < self.t_shift <= 10.0:
            raise BadRequest(f"t_shift must be in (0, 10], got {self.t_shift}", field="t_shift")


@dataclass(frozen=True)
class PreparedItem:
    """Everything the step function needs for one utterance. Tensors live on the CPU."""

    cond_ids: torch.Tensor  # [8, Lc] long: text ids repeated on 8 rows, then reference codes, then MASK × T
    audio_start: int  # first audio position (reference codes or target) in the cond row
    num_frames: int  # T, frames to generate (25 Hz)
    reveal: tuple[int, ...]  # positions unmasked at each step; sums to 8·T
    params: DecodeParams
    seed: int  # per-item noise seed (item noise mode)
    ref_rms: float | None  # clone reference loudness (None: auto/design)

    @property
    def cond_len(self) -> int:
        return int(self.cond_ids.shape[1])

    @property
    def num_tokens(self) -> int:
        """Tokens this item adds to every forward: cond row + uncond (target-only) row."""
        return self.cond_len + self.num_frames


def reveal_schedule(num_frames: int, num_step: int, t_shift: float, num_codebooks: int = 8) -> tuple[int, ...]:
    """Positions to unmask per step: t = linspace(0, 1, N+1) shifted by t' = s·t / (1 + (s−1)·t) (in fp32,
    as the released schedule), step k reveals ceil(8T·(t'_{k+1} − t'_k)) capped by what is left, the last
    step everything left."""
    lin = torch.linspace(0.0, 1.0, num_step + 1)
    t = (t_shift * lin / (1 + (t_shift - 1) * lin)).tolist()
    total = left = num_frames * num_codebooks
    counts = []
    for k in range(num_step):
        n = left if k == num_step - 1 else min(math.ceil(total * (t[k + 1] - t[k])), left)
        counts.append(int(n))
        left -= int(n)
    return tuple(counts)


def prepare(model: OmniVoiceModel, text: str, *, language: str | None = None, instruct: str | None = None,
            prompt: ClonePrompt | None = None, speed: float | None = None, duration_s: float | None = None,
            params: DecodeParams | None = None, denoise: bool = True, seed: int = 0) -> PreparedItem:
    """Validate one request and build its sequence:
    [<|denoise|>]? <|lang_start|>lang<|lang_end|> <|instruct_start|>instruct<|instruct_end|>
    <|text_start|>clean(ref_text + text)<|text_end|> [reference codes 8×Tr] [MASK 8×T].
    Raises BadRequest naming the field (text, instruct, num_step, ...)."""
    params = params or DecodeParams()
    params.validate()
    if not text or not text.strip():
        raise BadRequest("text must not be empty", field="text")
    validate_speed_duration(speed, duration_s)
    lang = resolve_language(language)
    instruct_norm = normalize_instruct(instruct, text)
    ref_text = prompt.ref_text if prompt is not None else None
    ref_frames = int(prompt.codes.shape[-1]) if prompt is not None else None
    num_frames = target_frames(text, ref_text, ref_frames, speed=speed, duration_s=duration_s)
    if num_frames > MAX_FRAMES:
        raise BadRequest(f"one segment may last at most {MAX_FRAMES // 25} s; this one needs {num_frames / 25:.1f} s "
                         "(split the text into sentences)", field="duration" if duration_s is not None else "text")

    style = "<|denoise|>" if (denoise and prompt is not None) else ""
    style += f"<|lang_start|>{lang or 'None'}<|lang_end|><|instruct_start|>{instruct_norm or 'None'}<|instruct_end|>"
    style_ids = _style_ids(model, style)
    text_ids: list[int] = []
    # Non-verbal tags are tokenized alone so their ids do not depend on the neighbouring characters.
    for piece in split_nonverbal(f"<|text_start|>{clean_text(text, ref_text)}<|text_end|>"):
        text_ids += model.tokenizer(piece, add_special_tokens=False).input_ids
    prefix = torch.tensor(style_ids + text_ids, dtype=torch.long)
    parts = [prefix[None, :].expand(model.num_codebooks, -1)]
    if prompt is not None:
        parts.append(prompt.codes.long().cpu())
    parts.append(torch.full((model.num_codebooks, num_frames), model.mask_id, dtype=torch.long))
    cond_ids = torch.cat(parts, dim=1).contiguous()  # [8, Lc]
    return PreparedItem(cond_ids=cond_ids, audio_start=int(prefix.numel()), num_frames=num_frames,
                        reveal=reveal_schedule(num_frames, params.num_step, params.t_shift, model.num_codebooks),
                        params=params, seed=int(seed), ref_rms=prompt.ref_rms if prompt is not None else None)


def _style_ids(model: OmniVoiceModel, style: str) -> list[int]:
    cache: dict[str, list[int]] = model.__dict__.setdefault("_style_cache", {})
    ids = cache.get(style)
    if ids is None:
        ids = list(model.tokenizer(style).input_ids)  # default special-token handling, as released
        if len(cache) < 4096:
            cache[style] = ids
    return ids
