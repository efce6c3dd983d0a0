"""Per-length CUDA graphs of the codec decoder (marked gpu; skipped without CUDA): the same waveforms as the
eager codec, graphs reused by length, long segments decoded eagerly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_graphed_decode_equals_the_codec(tiny_checkpoint: Path) -> None:
    from realtime_tts.gpu_worker.codec_graphs import CodecGraphs
    from realtime_tts.model import OmniVoiceModel

    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda")
    g = torch.Generator().manual_seed(0)
    grids = [torch.randint(0, model.mask_id, (8, t), generator=g).cuda() for t in (10, 10, 17, 70)]
    eager = model.codec.decode(grids)
    graphs = CodecGraphs(model.codec, max_frames=64)
    for _ in range(2):  # the second round replays the graphs captured in the first
        out = graphs.decode(grids)
        assert [w.shape for w in out] == [w.shape for w in eager]
        for a, b in zip(out, eager, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)
    assert graphs.stats.captured == 2 and sorted(graphs.graphs) == [10, 17]
    assert graphs.stats.hits == 6 and graphs.stats.misses == 2  # the 70-frame grid is past max_frames
