"""Exact batched codec decode across lengths (model/codec_batch.py) on the tiny codec: grids of different lengths
padded to one frame count and decoded in one call equal each grid's own unpadded Codec.decode, through the masked
walk over the stock modules and through the fused decoder (CPU: Triton's interpreter); plain padding without the
masks does not; and the chunk planner's contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tiny_codec import tiny_codec

from realtime_tts.model.codec_batch import Chunk, decode_batched, decode_padded, pad_grids, plan_chunks

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LENGTHS = (7, 23, 40, 64)


def _grids(lengths: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 1024, (8, t), generator=g) for t in lengths]


def _tolerance(ref: np.ndarray, device: str) -> float:
    # CPU: fp32 convs of other shapes (oneDNN may sum in another order): a few ulps, measured 3e-8 at peak 0.09.
    # CUDA: TF32 convs, the fused-codec tests' 1e-3.
    return 1e-5 * float(np.abs(ref).max()) if device == "cpu" else 1e-3


def _per_item(codec: Any, grids: list[torch.Tensor]) -> list[np.ndarray]:
    return [codec.decode([g])[0] for g in grids]  # each alone: no padding anywhere


@pytest.fixture(scope="module")
def codec(tiny_checkpoint: Path) -> Any:
    return tiny_codec(tiny_checkpoint, DEVICE)


def test_masked_batch_equals_per_item_decodes(codec: Any) -> None:
    grids = _grids(LENGTHS)
    ref = _per_item(codec, grids)
    # one call: all four padded to 64 frames
    out = decode_batched(codec.model, grids, max_pad_ratio=100.0)
    for a, r in zip(out, ref, strict=True):
        assert a.shape == r.shape
        np.testing.assert_allclose(a, r, rtol=0, atol=_tolerance(r, DEVICE))


def test_padding_frames_may_hold_any_valid_code(codec: Any) -> None:
    # the frames past each length decode to garbage latents (random ids here, not zeros): the masks drop them
    grids = _grids(LENGTHS, seed=1)
    ref = _per_item(codec, grids)
    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 1024, (len(grids), 8, 64), generator=g)
    for j, grid in enumerate(grids):
        codes[j, :, :grid.shape[-1]] = grid
    lengths = torch.tensor(LENGTHS, dtype=torch.long)
    with torch.inference_mode():
        wave = decode_padded(codec.model, codes.to(DEVICE), lengths.to(DEVICE)).cpu().numpy()
    assert wave.shape == (len(grids), 64 * 960)
    for j, r in enumerate(ref):
        np.testing.assert_allclose(wave[j, :r.shape[0]], r, rtol=0, atol=_tolerance(r, DEVICE))


def test_plain_padding_fails_the_same_check(codec: Any) -> None:
    # without the masks the padded frames leak into the last samples of every shorter item, far past the tolerance
    grids = _grids(LENGTHS)
    ref = _per_item(codec, grids)
    codes, _ = pad_grids(grids, 64, device=DEVICE)
    with torch.inference_mode():
        plain = codec.model.decode(codes).audio_values[:, 0].float().cpu().numpy()
    for j, r in enumerate(ref):
        err = float(np.abs(plain[j, :r.shape[0]] - r).max())
        if r.shape[0] < 64 * 960:
            assert err > 10 * _tolerance(r, DEVICE), (j, err)
        else:  # the longest item has no padding: plain equals masked there
            assert err <= _tolerance(r, DEVICE)


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU interpreter check; CUDA: tests/gpu_worker/test_codec_graphs.py")
def test_fused_decoder_masks_a_padded_batch(tiny_checkpoint: Path) -> None:
    """The fused decoder forward (kernels/dac_decoder.py, NCHW epilogues here: the interpreter is slow) with the
    lengths: the same audio as each item's own stock decode."""
    pytest.importorskip("triton")
    from realtime_tts.gpu_worker.kernels import use_fused_codec

    codec = tiny_codec(tiny_checkpoint, "cpu")
    grids = _grids((3, 9, 16), seed=2)
    ref = _per_item(codec, grids)
    assert use_fused_codec(codec.model) == 1
    assert type(codec.model.acoustic_decoder).accepts_lengths
    try:
        out = decode_batched(codec.model, grids, max_pad_ratio=100.0)
    finally:
        use_fused_codec(codec.model, enabled=False)
    for a, r in zip(out, ref, strict=True):
        assert a.shape == r.shape
        np.testing.assert_allclose(a, r, rtol=0, atol=_tolerance(r, "cpu"))


def test_plan_covers_each_item_once_within_bounds() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        lengths = [int(x) for x in rng.integers(1, 500, n)]
        chunks = plan_chunks(lengths, max_frames=400, max_batch_frames=2048)
        seen = sorted(i for c in chunks for i in c.items)
        assert seen == list(range(n))
        for c in chunks:
            longest = max(lengths[i] for i in c.items)
            assert c.frames >= longest and len(c.items) <= c.rows
            if longest > 400:  # eager: exact, and only long items together
                assert c.frames == longest and c.rows == len(c.items)
                assert all(lengths[i] > 400 for i in c.items)
            else:
                assert c.frames % 16 == 0 or c.frames == 400
                assert c.rows in (1, 2, 4, 8, 16) and c.rows * c.frames <= 2048
                assert (c.rows - len(c.items)) * 4 <= c.rows  # at most a quarter of the rows empty
                assert all(1.5 * lengths[i] >= longest for i in c.items)


def test_plan_batches_similar_lengths() -> None:
    assert plan_chunks([60] * 16) == [Chunk(tuple(range(16)), 64, 16)]
    # 7 items: padded to 8 rows (one empty); 5 items: 4 + 1, not 8 rows with 3 empty
    assert [c.rows for c in plan_chunks([60] * 7)] == [8]
    assert [(len(c.items), c.rows) for c in plan_chunks([60] * 5)] == [(4, 4), (1, 1)]
    # 17 frames pads to 32; 10 frames is under 17 / 1.5: a chunk of its own
    assert plan_chunks([10, 17, 17]) == [Chunk((1, 2), 32, 2), Chunk((0,), 16, 1)]


@pytest.mark.parametrize("channels_last", [False, True])
def test_epilogue_zeroes_the_snake_output_past_each_length(channels_last: bool) -> None:
    """conv_epilogue with lengths (the fused decoder's in-kernel masks): y as without, zeroed past lengths · scale
    of each item; raw untouched."""
    pytest.importorskip("triton")
    from tiny_codec import to_channels_last

    from realtime_tts.gpu_worker.kernels.dac_decoder import conv_epilogue
    from realtime_tts.model.codec_batch import pad_mask

    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 24, 40, generator=g).to(DEVICE)  # [B, C, T]: 5 frames at 8 samples per frame
    bias = torch.randn(24, generator=g).to(DEVICE)
    alpha = (0.2 + torch.rand(1, 24, 1, generator=g)).to(DEVICE)
    lengths = torch.tensor([5, 2, 0], dtype=torch.long, device=DEVICE)

    def arg(t: torch.Tensor) -> torch.Tensor:
        return to_channels_last(t) if channels_last else t.clone()

    raw0, y0 = conv_epilogue(arg(x), bias, alpha, keep_raw=True, tile=256, channels_last=channels_last)
    raw1, y1 = conv_epilogue(arg(x), bias, alpha, keep_raw=True, tile=256, channels_last=channels_last,
                             lengths=lengths, scale=8)
    assert raw0 is not None and raw1 is not None
    torch.testing.assert_close(raw1, raw0, rtol=0, atol=0)
    want = y0.masked_fill(pad_mask(lengths, 8, 40), 0.0)
    torch.testing.assert_close(y1, want, rtol=0, atol=0)
    assert bool((y1[1, :, 16:] == 0).all()) and bool((y1[1, :, :16] != 0).any())


def test_residual_unit_zeroes_its_output_past_each_length(codec: Any) -> None:
    pytest.importorskip("triton")
    from tiny_codec import to_channels_last

    from realtime_tts.gpu_worker.kernels import dac_units
    from realtime_tts.model.codec_batch import pad_mask

    unit = codec.model.acoustic_decoder.block[-1].res_unit2  # 2 channels, dilation 3
    alpha = codec.model.acoustic_decoder.block[-1].res_unit3.snake1.alpha
    channels = unit.conv1.in_channels
    g = torch.Generator().manual_seed(8)
    act = to_channels_last(torch.randn(2, channels, 30, generator=g).to(DEVICE))
    skip = to_channels_last(torch.randn(2, channels, 30, generator=g).to(DEVICE))
    lengths = torch.tensor([2, 1], dtype=torch.long, device=DEVICE)
    with torch.inference_mode():
        raw0, y0 = dac_units.residual_unit(unit, act, skip, alpha)
        raw1, y1 = dac_units.residual_unit(unit, act, skip, alpha, lengths=lengths, scale=12)
    assert raw0 is not None and raw1 is not None
    torch.testing.assert_close(raw1, raw0, rtol=0, atol=0)
    torch.testing.assert_close(y1, y0.masked_fill(pad_mask(lengths, 12, 30), 0.0), rtol=0, atol=0)
