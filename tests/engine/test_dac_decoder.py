"""The codec decoder's fused conv epilogues (bias add, residual add, Snake in one pass) against the stock ops
(CPU: Triton's interpreter; CUDA: native), and a tiny codec decoding the same audio with its decoder switched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

from tiny_codec import check_graph_replays, tiny_codec

from realtime_tts.engine import kernels
from realtime_tts.engine.kernels.dac_decoder import conv_epilogue, conv_epilogue_ref, use_fused_codec

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(shape: tuple[int, int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(*shape, generator=g)  # [B, C, T]
    bias = torch.randn(shape[1], generator=g)  # [C]
    alpha = 0.05 + 2 * torch.rand(1, shape[1], 1, generator=g)  # [1, C, 1]
    skip = 2 * torch.randn(*shape, generator=g)  # [B, C, T]
    return x.to(DEVICE), bias.to(DEVICE), alpha.to(DEVICE), skip.to(DEVICE)


@pytest.mark.parametrize("tile", [64, 1024])
@pytest.mark.parametrize("shape", [(3, 5, 37), (2, 7, 1), (1, 3, 1500), (2, 1, 2049)])
@pytest.mark.parametrize(("with_bias", "with_skip", "keep_raw", "inplace"), [
    (True, False, False, True),  # conv → Snake (the residual unit's first conv, the decoder's first conv)
    (True, False, True, True),  # conv → Snake and skip (the upsampling conv)
    (True, True, True, True),  # skip + conv → Snake and the next skip (residual units 1, 2)
    (True, True, False, True),  # skip + conv → Snake (residual unit 3)
    (False, True, True, False),
])
def test_epilogue_matches_the_stock_ops(shape: tuple[int, int, int], tile: int, with_bias: bool, with_skip: bool,
                                        keep_raw: bool, inplace: bool) -> None:
    x, bias, alpha, skip = _inputs(shape, sum(shape) + tile)
    b = bias if with_bias else None
    s = skip if with_skip else None
    ref_raw, ref_y = conv_epilogue_ref(x, b, alpha, s)
    x_arg = x.clone()
    raw, y = conv_epilogue(x_arg, b, alpha, skip=s, keep_raw=keep_raw, inplace=inplace, tile=tile)
    assert y.shape == x.shape and y.dtype == x.dtype
    if keep_raw:
        assert raw is not None
        torch.testing.assert_close(raw, ref_raw, rtol=0, atol=0)  # the same fp32 additions in the same order
    else:
        assert raw is None
    # Snake of the same fp32 values as the Snake kernel computes it: equal to the bit (one sin implementation)
    torch.testing.assert_close(y, kernels.snake(ref_raw, alpha, tile=tile), rtol=0, atol=0)
    # and close to torch's own sin
    torch.testing.assert_close(y, ref_y, rtol=1e-5, atol=1e-5 * float(ref_y.abs().max()))
    if inplace:  # x took raw (kept) or y
        taken = raw if raw is not None else y
        assert taken.data_ptr() == x_arg.data_ptr()
    else:
        torch.testing.assert_close(x_arg, x, rtol=0, atol=0)


def test_epilogue_on_strided_skip_and_input() -> None:
    x, bias, alpha, _ = _inputs((2, 6, 70), 9)
    g = torch.Generator().manual_seed(10)
    wide = torch.randn(2, 6, 90, generator=g).to(DEVICE)
    skip = wide[:, :, 10:80]  # rows strided by 90 (a residual unit's trimmed skip)
    xt = x.transpose(1, 2).contiguous().transpose(1, 2)  # [2, 6, 70], samples strided by 6
    raw, y = conv_epilogue(xt, bias, alpha, skip=skip, keep_raw=True, inplace=True, tile=128)
    ref_raw, _ = conv_epilogue_ref(x, bias, alpha, skip)
    assert raw is not None
    torch.testing.assert_close(raw, ref_raw, rtol=0, atol=0)
    torch.testing.assert_close(y, kernels.snake(ref_raw, alpha, tile=128), rtol=0, atol=0)


def test_epilogue_is_per_channel() -> None:
    # one channel's bias changed: only that channel's outputs move
    x, bias, alpha, skip = _inputs((2, 4, 33), 3)
    raw0, y0 = conv_epilogue(x, bias, alpha, skip=skip, keep_raw=True)
    bias2 = bias.clone()
    bias2[1] += 0.25
    raw1, y1 = conv_epilogue(x, bias2, alpha, skip=skip, keep_raw=True)
    assert raw0 is not None and raw1 is not None
    assert (raw1 != raw0).any(dim=2).any(dim=0).tolist() == [False, True, False, False]
    assert (y1 != y0).any(dim=2).any(dim=0).tolist() == [False, True, False, False]


def _decoder_classes(codec: Any) -> list[str]:
    return [type(m).__name__ for m in codec.model.modules() if type(m).__name__.endswith("DacDecoder")]


def _bias_added_apart(decoder: Any) -> list[torch.utils.hooks.RemovableHandle]:
    """Hooks that make the decoder's convs add their bias as PyTorch does after a cuDNN conv: conv without bias,
    then `out.add_(bias)` (on CPU oneDNN adds it inside the conv, rounding differently). Not the last conv: the
    fused decoder runs that one stock too."""
    def conv_then_bias(m: Any, args: tuple[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
        x = args[0]
        if m.transposed:
            raw = torch.nn.functional.conv_transpose1d(x, m.weight, None, m.stride, m.padding, m.output_padding,
                                                       m.groups, m.dilation)
        else:
            raw = torch.nn.functional.conv1d(x, m.weight, None, m.stride, m.padding, m.dilation, m.groups)
        out_b: torch.Tensor = raw.add_(m.bias.reshape(1, -1, 1))
        return out_b
    return [m.register_forward_hook(conv_then_bias) for m in decoder.modules()
            if isinstance(m, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)) and m is not decoder.conv2]


def _switch_and_compare(codec: Any, lengths: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    grids = [torch.randint(0, 1024, (8, t), generator=g) for t in lengths]
    keys = list(codec.model.state_dict())
    stock = codec.decode(grids)
    assert kernels.use_fused_snake(codec.model) > 0
    # the fused-Snake decoder with the stock CUDA op sequence around each conv (cuDNN conv, then its bias add)
    hooks = _bias_added_apart(codec.model.acoustic_decoder)
    fused_snake = codec.decode(grids)
    for h in hooks:
        h.remove()
    assert use_fused_codec(codec.model) == 1
    assert use_fused_codec(codec.model) == 0  # idempotent
    assert _decoder_classes(codec) == ["FusedDacDecoder"]
    assert list(codec.model.state_dict()) == keys
    fused = codec.decode(grids)
    for a, s, r in zip(fused, fused_snake, stock, strict=True):
        assert a.shape == r.shape
        if codec.device.type == "cuda":
            # the stock decoder's fp32 ops in the same order, around the same cuDNN calls: bit-identical
            np.testing.assert_array_equal(a, r)
        else:
            # the same fp32 ops in the same order as the fused-Snake decoder with its biases added apart (one sin
            # implementation, the interpreter's, on both sides): equal to the bit
            np.testing.assert_array_equal(a, s)
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5 * float(np.abs(r).max()))
    assert use_fused_codec(codec.model, enabled=False) == 1
    kernels.use_fused_snake(codec.model, enabled=False)
    assert _decoder_classes(codec) == ["DacDecoder"]
    for a, r in zip(codec.decode(grids), stock, strict=True):
        np.testing.assert_array_equal(a, r)


def test_tiny_codec_decodes_the_same_audio_with_its_decoder_fused(tiny_checkpoint: Path) -> None:
    codec = tiny_codec(tiny_checkpoint, DEVICE)
    _switch_and_compare(codec, (5, 5, 7))


def test_fused_codec_alone_matches_stock(tiny_checkpoint: Path) -> None:
    # without use_fused_snake: the fused decoder reads the stock Snake1d modules' alphas itself
    codec = tiny_codec(tiny_checkpoint, DEVICE)
    g = torch.Generator().manual_seed(2)
    grids = [torch.randint(0, 1024, (8, 6), generator=g)]
    stock = codec.decode(grids)
    assert use_fused_codec(codec.model) == 1
    assert not any(type(m).__name__ == "FusedSnake1d" for m in codec.model.modules())
    np.testing.assert_allclose(codec.decode(grids)[0], stock[0], rtol=1e-5, atol=1e-5 * float(np.abs(stock[0]).max()))


def test_decoder_with_a_hook_is_left_stock(tiny_checkpoint: Path) -> None:
    codec = tiny_codec(tiny_checkpoint, "cpu")
    decoder = codec.model.acoustic_decoder
    handle = decoder.block[0].res_unit1.conv1.register_forward_pre_hook(lambda m, args: None)
    assert use_fused_codec(codec.model) == 0
    handle.remove()
    assert use_fused_codec(codec.model) == 1
    assert use_fused_codec(codec.model, enabled=False) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tiny_codec_on_cuda_fused_and_graph_captured(tiny_checkpoint: Path) -> None:
    codec = tiny_codec(tiny_checkpoint, "cuda")
    _switch_and_compare(codec, (10, 10, 17, 150))

    def switch(model: torch.nn.Module) -> None:  # the fused decoder, captured then replayed
        kernels.use_fused_snake(model)
        use_fused_codec(model)

    check_graph_replays(codec, switch, np.testing.assert_array_equal)
