"""The tiny random-weight codec that the codec kernel tests decode with, and the CUDA-graph check that the Snake
and decoder switches share (tests only)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode


def tiny_codec(tiny_checkpoint: Path, device: str) -> Any:
    """The tiny checkpoint's codec in fp32, its Snake alphas (all 1 in the random checkpoint) and decoder conv
    biases spread, so that channel or bias mix-ups show in the audio."""
    from realtime_tts.model import OmniVoiceModel

    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device=device)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in model.codec.model.named_parameters():
            if name.endswith("alpha"):
                p.copy_(0.3 + 1.5 * torch.rand(p.shape, generator=g))
            elif name.startswith("acoustic_decoder") and name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model.codec


def check_graph_replays(codec: Any, switch: Callable[[torch.nn.Module], object],
                        same: Callable[[np.ndarray, np.ndarray], None]) -> None:
    """CUDA: stock eager decodes of three grids (two lengths), then `switch(codec.model)` and the codec's per-length
    batch-1 CUDA graphs (captured on the first round, replayed on the second): each round's audio `same` as stock;
    then the padded batched graphs (other conv shapes than stock's, so TF32 sums in another order: within 1e-3)."""
    from realtime_tts.gpu_worker.codec_graphs import CodecGraphs, PerLengthCodecGraphs

    g = torch.Generator().manual_seed(1)
    grids = [torch.randint(0, 1024, (8, t), generator=g).cuda() for t in (10, 17, 17)]
    stock = codec.decode(grids)
    switch(codec.model)
    per_length = PerLengthCodecGraphs(codec, max_frames=64)
    for _round in range(2):
        for a, b in zip(per_length.decode(grids), stock, strict=True):
            same(a, b)
    assert per_length.stats.captured == 2 and not per_length.stats.failed
    batched = CodecGraphs(codec, max_frames=64)
    for _round in range(2):
        for a, b in zip(batched.decode(grids), stock, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-3)
    # 17, 17 in one 2 x 32-frame graph; 10 (under 17 / 1.5) alone in 1 x 16
    assert sorted(batched.graphs) == [(1, 16), (2, 32)] and not batched.stats.failed


def assert_close_audio(a: np.ndarray, r: np.ndarray, device: str) -> None:
    """A channels-last decoder's waveform a against the stock one r. CPU: fp32 convs, but oneDNN's NHWC conv
    kernels sum in another order than its NCW ones: a few ulps apart (measured up to 3e-8 on audio of peak 0.09),
    not bit-equal. CUDA: TF32 convs, 1e-3 abs."""
    if device == "cpu":
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5 * float(np.abs(r).max()))
    else:
        np.testing.assert_allclose(a, r, rtol=0, atol=1e-3)


class _OpLog(TorchDispatchMode):
    """Every aten op a forward runs, with its tensor arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, list[torch.Tensor]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append((str(func), [a for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def decode_logged(codec: Any, switch: Callable[[torch.nn.Module], object]
                  ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[str, list[torch.Tensor]]]]:
    """The tiny codec's acoustic decoder on random CPU latents [2, D, 6], stock, then after switch(codec.model):
    → (stock waveform, switched waveform, every aten op of the switched forward with its tensor arguments)."""
    decoder = codec.model.acoustic_decoder
    x = torch.randn(2, decoder.conv1.in_channels, 6)  # [B, D, T]
    with torch.inference_mode():
        stock = decoder(x)  # [B, 1, T_wave]
    switch(codec.model)
    with torch.inference_mode(), _OpLog() as log:
        wave = decoder(x)
    return stock, wave, log.ops


def to_channels_last(t: torch.Tensor) -> torch.Tensor:
    """t [B, C, T] with the same values in [B, T, C] memory (channel stride 1), as the channels-last decoder
    holds its activations."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)
