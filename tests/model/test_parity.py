"""Our OmniVoice implementation against the reference (same tiny checkpoint, fp32, CPU).

Equivalence pinned here: with noise="reference" our step draws the global torch RNG in the reference's
order, so the same seed gives the SAME codes, although we pack cond/uncond rows (no padding, attention per
row, heads only on target frames) where the reference pads every row to the longest cond row and masks.
Packing changes float summation order only (~1e-7), far below the gaps that decide argmax / top-k.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from realtime_tts.model import ClonePrompt, DecodeParams, OmniVoiceModel, match_loudness
from realtime_tts.model.decoding import ItemState, pack
from realtime_tts.model.decoding import run as ov_run
from realtime_tts.model.sequence import prepare as ov_prepare

MIXED_TEXTS = [
    "Hello there.",
    "A longer sentence, to vary the lengths of the rows quite a bit more than the first one!",
    "Short [laughter] one, then [sigh] a pause.",
]


def _reference_codes(reference: Any, seed: int, **kwargs: Any) -> list[torch.Tensor]:
    """The reference's own decoding loop on its own preprocessing (no decode / post-processing)."""
    from omnivoice import OmniVoiceGenerationConfig

    gen_keys = {"num_step", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                "class_temperature", "denoise"}
    cfg = OmniVoiceGenerationConfig(**{k: v for k, v in kwargs.items() if k in gen_keys})
    task = reference._preprocess_all(**{k: v for k, v in kwargs.items() if k not in gen_keys})
    torch.manual_seed(seed)
    return reference._generate_iterative(task, cfg)


def _ours(ours: OmniVoiceModel, seed: int, texts: list[str], prompts: list[ClonePrompt | None] | None = None,
          params: DecodeParams | None = None, **kwargs: Any) -> list[torch.Tensor]:
    prompts = prompts or [None] * len(texts)
    items = [ov_prepare(ours, t, prompt=p, params=params, **kwargs) for t, p in zip(texts, prompts, strict=True)]
    torch.manual_seed(seed)
    return ov_run(ours, items, noise="reference")


def _assert_same(ref: list[torch.Tensor], got: list[torch.Tensor]) -> None:
    assert len(ref) == len(got)
    for r, g in zip(ref, got, strict=True):
        assert r.shape == g.shape
        assert torch.equal(r.cpu(), g.cpu()), f"{(r != g).sum().item()} of {r.numel()} codes differ"
        assert int((g == 1024).sum()) == 0  # every position revealed


def _random_prompt(ours: OmniVoiceModel, reference: Any, seconds: float, seed: int, text: str,
                   sample_rate: int = 16000) -> tuple[ClonePrompt, Any]:
    gen = torch.Generator().manual_seed(seed)
    audio = (torch.randn(int(seconds * sample_rate), generator=gen) * 0.03).numpy().astype(np.float32)
    mine = ours.encode_prompt(audio, sample_rate, text, add_punctuation=False)
    theirs = reference.create_voice_clone_prompt((torch.from_numpy(audio), sample_rate), ref_text=text,
                                                 preprocess_prompt=False)
    return mine, theirs


def test_auto_mixed_batch_codes_equal(ours: OmniVoiceModel, reference: Any) -> None:
    ref = _reference_codes(reference, 11, text=MIXED_TEXTS, language="en")
    got = _ours(ours, 11, MIXED_TEXTS, language="en")
    assert len({g.shape[1] for g in got}) == 3  # genuinely mixed lengths
    _assert_same(ref, got)


def test_auto_codes_depend_on_the_seed(ours: OmniVoiceModel) -> None:
    a = _ours(ours, 1, MIXED_TEXTS[:1], params=DecodeParams(num_step=8))
    b = _ours(ours, 2, MIXED_TEXTS[:1], params=DecodeParams(num_step=8))
    assert not torch.equal(a[0], b[0])


@pytest.mark.parametrize("instruct", ["female, low pitch, british accent", "Male,Elderly，whisper"])
def test_design_mixed_batch_codes_equal(ours: OmniVoiceModel, reference: Any, instruct: str) -> None:
    texts = MIXED_TEXTS[:2] + ["你好，世界。今天天气很好。"]
    ref = _reference_codes(reference, 5, text=texts, language=["en", "English", "zh"], instruct=instruct,
                           num_step=16)
    items = [ov_prepare(ours, t, language=lang, instruct=instruct, params=DecodeParams(num_step=16))
             for t, lang in zip(texts, ["en", "English", "zh"], strict=True)]
    torch.manual_seed(5)
    _assert_same(ref, ov_run(ours, items, noise="reference"))


def test_clone_prompt_encoding_equal(ours: OmniVoiceModel, reference: Any) -> None:
    mine, theirs = _random_prompt(ours, reference, 2.3, 0, "This is the reference")
    assert torch.equal(mine.codes, theirs.ref_audio_tokens.cpu())
    assert mine.ref_rms == pytest.approx(theirs.ref_rms, rel=0, abs=0)
    assert mine.codes.shape == (8, int(2.3 * 24000) // 960)


def test_clone_mixed_batch_codes_equal(ours: OmniVoiceModel, reference: Any) -> None:
    pairs = [_random_prompt(ours, reference, s, i, t) for i, (s, t) in
             enumerate([(1.5, "First reference."), (3.1, "The second reference is longer"), (2.0, "Third")])]
    ref = _reference_codes(reference, 3, text=MIXED_TEXTS, language="en",
                           voice_clone_prompt=[p[1] for p in pairs], num_step=16)
    got = _ours(ours, 3, MIXED_TEXTS, prompts=[p[0] for p in pairs], language="en",
                params=DecodeParams(num_step=16))
    _assert_same(ref, got)


def test_clone_without_denoise_and_with_speed_duration(ours: OmniVoiceModel, reference: Any) -> None:
    mine, theirs = _random_prompt(ours, reference, 2.0, 9, "A reference")
    ref = _reference_codes(reference, 4, text=MIXED_TEXTS[:2], language="en", voice_clone_prompt=theirs,
                           num_step=12, denoise=False, speed=[1.3, None], duration=[None, 2.2])
    items = [ov_prepare(ours, MIXED_TEXTS[0], language="en", prompt=mine, speed=1.3, denoise=False,
                          params=DecodeParams(num_step=12)),
             ov_prepare(ours, MIXED_TEXTS[1], language="en", prompt=mine, duration_s=2.2, denoise=False,
                          params=DecodeParams(num_step=12))]
    assert items[1].num_frames == 55
    torch.manual_seed(4)
    _assert_same(ref, ov_run(ours, items, noise="reference"))


def test_class_temperature_sampling_codes_equal(ours: OmniVoiceModel, reference: Any) -> None:
    knobs = {"num_step": 10, "class_temperature": 0.8, "position_temperature": 2.0, "guidance_scale": 1.5}
    ref = _reference_codes(reference, 8, text=MIXED_TEXTS[:2], language="en", instruct="female", **knobs)
    params = DecodeParams(num_step=10, class_temperature=0.8, position_temperature=2.0, guidance_scale=1.5)
    got = _ours(ours, 8, MIXED_TEXTS[:2], language="en", instruct="female", params=params)
    _assert_same(ref, got)


def test_no_guidance_no_position_noise_codes_equal(ours: OmniVoiceModel, reference: Any) -> None:
    knobs = {"num_step": 6, "guidance_scale": 0.0, "position_temperature": 0.0, "layer_penalty_factor": 1.0}
    ref = _reference_codes(reference, 0, text=MIXED_TEXTS[:2], **knobs)
    got = _ours(ours, 0, MIXED_TEXTS[:2],
                params=DecodeParams(num_step=6, guidance_scale=0.0, position_temperature=0.0, layer_penalty=1.0))
    _assert_same(ref, got)


def test_packed_logits_match_padded_reference_forward(ours: OmniVoiceModel, reference: Any) -> None:
    """The forward itself: our packed rows vs the reference's padded, masked batch (float tolerance)."""
    items = [ov_prepare(ours, t, language="en") for t in MIXED_TEXTS]
    batch = pack([ItemState.start(it) for it in items], "cpu")
    with torch.inference_mode():
        hidden = ours.hidden(batch.ids, batch.audio_mask, batch.positions, batch.cu_seqlens, batch.max_seqlen)
        mine = ours.head(hidden[batch.cond_index])  # [B, Tmax, 8, V]
        for b, it in enumerate(items):
            inp = reference._prepare_inference_inputs(MIXED_TEXTS[b], it.num_frames, lang="en")
            full = torch.ones(1, 1, it.cond_len, it.cond_len, dtype=torch.bool)  # bidirectional, as generate()
            theirs = reference(input_ids=inp["input_ids"], audio_mask=inp["audio_mask"],
                               attention_mask=full).logits[0]  # [8, L, V]
            theirs = theirs[:, -it.num_frames:].permute(1, 0, 2)
            torch.testing.assert_close(mine[b, :it.num_frames], theirs, atol=2e-5, rtol=1e-5)


def test_waveforms_match_reference(ours: OmniVoiceModel, reference: Any) -> None:
    """Same codes → the reference's full generate() output (no silence trim / fades / pads) equals our
    batched decode + loudness rule to float tolerance, for auto (peak 0.5) and a quiet clone reference."""
    mine_prompt, their_prompt = _random_prompt(ours, reference, 1.2, 3, "Quiet reference.")
    assert mine_prompt.ref_rms < 0.1
    post = {"postprocess_output": False, "pad_duration": 0.0, "fade_duration": 0.0, "num_step": 8}
    for prompt_pair in (None, (mine_prompt, their_prompt)):
        torch.manual_seed(21)
        kwargs = {"voice_clone_prompt": prompt_pair[1]} if prompt_pair else {}
        ref_audio = reference.generate(text=MIXED_TEXTS, language="en", **kwargs, **post)
        prompts = [prompt_pair[0]] * 3 if prompt_pair else None
        codes = _ours(ours, 21, MIXED_TEXTS, prompts=prompts, language="en", params=DecodeParams(num_step=8))
        waves = ours.decode(codes)
        for wave, code, theirs in zip(waves, codes, ref_audio, strict=True):
            assert wave.dtype == np.float32 and wave.shape == (960 * code.shape[1],)
            rms = prompt_pair[0].ref_rms if prompt_pair else None
            np.testing.assert_allclose(match_loudness(wave, rms), theirs, atol=1e-5, rtol=1e-4)


def test_batched_decode_equals_one_by_one(ours: OmniVoiceModel) -> None:
    gen = torch.Generator().manual_seed(0)
    codes = [torch.randint(0, 1024, (8, n), generator=gen) for n in (30, 45, 30, 7)]
    together = ours.decode(codes)
    for c, w in zip(codes, together, strict=True):
        np.testing.assert_allclose(ours.decode([c])[0], w, atol=1e-6, rtol=1e-5)
        assert math.isfinite(float(np.abs(w).max()))
