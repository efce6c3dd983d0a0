"""The HiggsAudioV2 codec (transformers model from <checkpoint>/audio_tokenizer): batched decode of code
grids to 24 kHz audio, and reference recordings → reusable clone prompts (codes + transcript + loudness).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchaudio

from realtime_tts.engine.base import VoicePrompt
from realtime_tts.errors import BadRequest
from realtime_tts.omnivoice_text import end_with_punctuation

_PROMPT_FORMAT = 1
_QUIET_RMS = 0.1  # references quieter than this are boosted to it before encoding (and the output matched)


@dataclass(frozen=True)
class ClonePrompt:
    """A voice to clone: reference codes [8, frames] (int64, CPU), their transcript, reference RMS."""

    codes: torch.Tensor
    ref_text: str
    ref_rms: float

    def save(self, path: str | os.PathLike[str]) -> None:
        torch.save({"format_version": _PROMPT_FORMAT, "codes": self.codes.detach().cpu(),
                    "ref_text": self.ref_text, "ref_rms": float(self.ref_rms)}, str(path))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ClonePrompt:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
        if data.get("format_version") != _PROMPT_FORMAT:
            raise ValueError(f"{path}: unsupported clone prompt format {data.get('format_version')!r}")
        return cls(codes=data["codes"].long(), ref_text=data["ref_text"], ref_rms=float(data["ref_rms"]))

    def to_voice_prompt(self) -> VoicePrompt:
        """The engine-neutral form the web process stores: codes as int16 little-endian bytes."""
        codes = self.codes.cpu().numpy().astype("<i2")
        return VoicePrompt(engine="omnivoice", ref_text=self.ref_text, codes=codes.tobytes(),
                           num_codebooks=codes.shape[0], num_frames=codes.shape[1], ref_rms=float(self.ref_rms))

    @classmethod
    def from_voice_prompt(cls, prompt: VoicePrompt) -> ClonePrompt:
        if prompt.engine != "omnivoice":
            raise BadRequest(f"voice prompt was made by engine {prompt.engine!r}, not omnivoice", field="voice")
        flat = np.frombuffer(prompt.codes, dtype="<i2")
        if flat.size != prompt.num_codebooks * prompt.num_frames or prompt.num_codebooks != 8:
            raise BadRequest("voice prompt codes do not match their declared shape [8, frames]", field="voice")
        if prompt.num_frames < 1 or flat.min(initial=0) < 0 or flat.max(initial=0) > 1023:
            raise BadRequest("voice prompt codes must be 1+ frames of ids 0..1023", field="voice")
        codes = torch.from_numpy(flat.astype(np.int64).reshape(prompt.num_codebooks, prompt.num_frames))
        return cls(codes=codes, ref_text=prompt.ref_text, ref_rms=prompt.ref_rms)


class Codec:
    """Wraps transformers' HiggsAudioV2TokenizerModel (fp32)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.sample_rate: int = model.config.sample_rate
        self.hop_length: int = model.config.hop_length
        self.frame_rate: int = model.config.frame_rate
        self.num_codebooks: int = model.config.num_quantizers
        self.calls = 0  # decode(): model calls made (one per distinct length) and items decoded, since start
        self.items = 0

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], device: str | torch.device = "cpu") -> Codec:
        from transformers import HiggsAudioV2TokenizerModel

        model: Any = HiggsAudioV2TokenizerModel.from_pretrained(str(Path(path)), dtype=torch.float32)
        return cls(model.to(device).eval().requires_grad_(False))

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.model.parameters()).device
        return device

    @torch.inference_mode()
    def decode(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """Code grids [8, T_i] → float32 waveforms [960·T_i] (unbounded; no tanh).

        Items of equal length share one batched call. Lengths are not padded together here: the decoder's
        convolutions see across frame boundaries, so plain padding would change the last samples of short items
        (model/codec_batch.py pads them exactly, masking every conv's input past each length).
        """
        groups: dict[int, list[int]] = defaultdict(list)
        for i, c in enumerate(codes):
            groups[int(c.shape[-1])].append(i)
        out: list[np.ndarray | None] = [None] * len(codes)
        for _, idx in sorted(groups.items()):
            batch = torch.stack([codes[i] for i in idx]).to(self.device)  # [b, 8, T]
            waves = self.model.decode(batch).audio_values  # [b, 1, 960·T]
            self.calls += 1
            self.items += len(idx)
            waves = waves[:, 0].float().cpu().numpy()
            for j, i in enumerate(idx):
                out[i] = waves[j]
        return [w for w in out if w is not None]

    @torch.inference_mode()
    def encode_prompt(self, audio: np.ndarray | torch.Tensor, sample_rate: int, ref_text: str,
                      add_punctuation: bool = True) -> ClonePrompt:
        """Reference recording (mono [S] or [channels, S], float) → ClonePrompt.

        Downmixes, resamples to 24 kHz with torchaudio, boosts a quiet reference to RMS 0.1 (its original
        RMS is kept to match the output loudness), cuts to whole frames, encodes. The reference recording
        is not silence-trimmed here: callers trim edges before (the service owns audio hygiene).
        """
        wave = audio.detach().cpu().numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio)
        wave = wave.astype(np.float32, copy=False)
        if wave.ndim == 1:
            wave = wave[np.newaxis, :]
        if wave.ndim != 2 or wave.shape[-1] == 0:
            raise BadRequest("reference audio must be a non-empty mono or [channels, samples] signal", field="audio")
        if wave.shape[0] > 1:
            wave = np.mean(wave, axis=0, keepdims=True)
        if sample_rate != self.sample_rate:
            wave = torchaudio.functional.resample(torch.from_numpy(wave), orig_freq=sample_rate,
                                                  new_freq=self.sample_rate).numpy()
        # numpy's pairwise mean, as the reference computes it: the value feeds the loudness rule.
        rms = float(np.sqrt(np.mean(wave ** 2)))
        if 0 < rms < _QUIET_RMS:
            wave = wave * _QUIET_RMS / rms
        usable = wave.shape[-1] - wave.shape[-1] % self.hop_length
        if usable == 0:
            raise BadRequest(f"reference audio is shorter than one codec frame ({self.hop_length} samples "
                             f"at {self.sample_rate} Hz)", field="audio")
        wave = wave[:, :usable]
        codes = self.model.encode(torch.from_numpy(wave).to(self.device)[None]).audio_codes[0]  # [8, Tr]
        text = end_with_punctuation(ref_text) if add_punctuation else ref_text
        return ClonePrompt(codes=codes.long().cpu(), ref_text=text, ref_rms=rms)


def fade_edges(wave: np.ndarray, sample_rate: int, fade_s: float = 0.1) -> np.ndarray:
    """The released model's output edge rule (its post-processing fades every generation in and out, linearly,
    over 100 ms, or half the audio when shorter): the codec's first and last samples can jump (random weights:
    a 0.2 full-scale step at every segment start), which is a click wherever segments are joined."""
    k = min(int(fade_s * sample_rate), wave.shape[-1] // 2)
    if k <= 0:
        return wave
    out = wave.astype(np.float32, copy=True)
    ramp = np.linspace(0.0, 1.0, k, dtype=np.float32)
    out[..., :k] *= ramp
    out[..., -k:] *= ramp[::-1]
    return out


def match_loudness(wave: np.ndarray, ref_rms: float | None) -> np.ndarray:
    """The released model's output level rule: a clone of a quiet reference (RMS < 0.1) is scaled back
    down to its level; otherwise (no reference) the peak is normalised to 0.5."""
    if ref_rms is not None and ref_rms < _QUIET_RMS:
        return wave * ref_rms / _QUIET_RMS
    if ref_rms is None:
        peak = float(np.abs(wave).max()) if wave.size else 0.0
        if peak > 1e-6:
            return wave / peak * 0.5
    return wave
