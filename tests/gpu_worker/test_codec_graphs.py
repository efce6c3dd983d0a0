"""The codec's CUDA graphs (marked gpu; skipped without CUDA): padded batches across lengths through graphs per
(batch bucket, frame bucket) give each segment its own unpadded decode's audio, with the stock decoder and with the
fused channels-last decoder; long segments decode eagerly through the same masked batches; and the per-length
batch-1 graphs of the scheme before (kept for the bench) still equal the codec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_codec import tiny_codec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

LENGTHS = (7, 23, 40, 64, 64, 33, 100, 12, 45)  # 100: past max_frames (eager)


def _grids(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 1024, (8, t), generator=g).cuda() for t in LENGTHS]


@pytest.mark.parametrize("decoder", ["stock", "fused_cl_units"])
def test_batched_graphs_equal_per_item_stock_decodes(tiny_checkpoint: Path, decoder: str) -> None:
    from realtime_tts.gpu_worker.codec_graphs import CodecGraphs
    from realtime_tts.gpu_worker.kernels import use_fused_codec, use_fused_snake

    codec = tiny_codec(tiny_checkpoint, "cuda")
    grids = _grids(0)
    stock = [codec.decode([g])[0] for g in grids]  # each item alone, unpadded, stock decoder
    if decoder == "fused_cl_units":
        use_fused_snake(codec.model)
        assert use_fused_codec(codec.model, channels_last=True, fused_units=True) == 1
    graphs = CodecGraphs(codec, max_frames=64)
    for _round in range(2):  # the second round replays what the first captured
        out = graphs.decode(grids)
        assert [w.shape for w in out] == [w.shape for w in stock]
        for a, r in zip(out, stock, strict=True):
            # the existing fused-codec tolerance (TF32 convs of other shapes and layouts: not bit-equal)
            np.testing.assert_allclose(a, r, rtol=0, atol=1e-3)
    assert not graphs.stats.failed
    assert all(rows in (1, 2, 4, 8, 16) and frames % 16 == 0 and frames <= 64 for rows, frames in graphs.graphs)
    num_graphs = len(graphs.graphs)
    assert graphs.stats.captured == num_graphs  # nothing captured again on the second round
    assert graphs.stats.misses == 2 and graphs.stats.hits == 2 * (len(LENGTHS) - 1)  # the 100-frame grid: eager
    assert graphs.stats.calls < 2 * len(LENGTHS)  # batched: fewer calls than items


def test_masked_batches_differ_without_masks(tiny_checkpoint: Path) -> None:
    """The check above can fail: the same padded batch decoded without masks is off in the short items."""
    from realtime_tts.model.codec_batch import pad_grids

    codec = tiny_codec(tiny_checkpoint, "cuda")
    grids = _grids(1)[:4]
    stock = [codec.decode([g])[0] for g in grids]
    codes, _ = pad_grids(grids, 64)
    with torch.inference_mode():
        plain = codec.model.decode(codes).audio_values[:, 0].float().cpu().numpy()
    worst = max(float(np.abs(plain[j, :len(r)] - r).max()) for j, r in enumerate(stock) if len(r) < 64 * 960)
    assert worst > 1e-2


def test_per_length_graphs_equal_the_codec(tiny_checkpoint: Path) -> None:
    from realtime_tts.gpu_worker.codec_graphs import PerLengthCodecGraphs
    from realtime_tts.model import OmniVoiceModel

    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda")
    g = torch.Generator().manual_seed(0)
    grids = [torch.randint(0, model.mask_id, (8, t), generator=g).cuda() for t in (10, 10, 17, 70)]
    eager = model.codec.decode(grids)
    graphs = PerLengthCodecGraphs(model.codec, max_frames=64)
    for _ in range(2):  # the second round replays the graphs captured in the first
        out = graphs.decode(grids)
        assert [w.shape for w in out] == [w.shape for w in eager]
        for a, b in zip(out, eager, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)
    assert graphs.stats.captured == 2 and sorted(graphs.graphs) == [10, 17]
    assert graphs.stats.hits == 6 and graphs.stats.misses == 2  # the 70-frame grid is past max_frames


def test_warm_up_captures_what_serving_decodes_use(tiny_checkpoint: Path) -> None:
    from realtime_tts.gpu_worker.codec_graphs import CodecGraphs
    from realtime_tts.gpu_worker.kernels import use_fused_codec, use_fused_snake

    codec = tiny_codec(tiny_checkpoint, "cuda")
    use_fused_snake(codec.model)
    use_fused_codec(codec.model, channels_last=True, fused_units=True)
    graphs = CodecGraphs(codec, max_frames=400)
    keys = graphs.warm_keys(max_frames=64)
    assert keys == [(r, f) for r in (1, 2, 4, 8, 16) for f in (16, 32, 48, 64)]
    assert graphs.warm_up(max_frames=64) == len(keys)
    grids = [g for g in _grids(2) if g.shape[-1] <= 64]
    graphs.decode(grids)
    assert graphs.stats.captured == len(keys)  # nothing captured while decoding
