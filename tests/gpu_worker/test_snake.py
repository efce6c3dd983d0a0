"""The fused Snake kernel against its plain-torch reference (CPU: Triton's interpreter; CUDA: native), and a tiny
codec that decodes the same audio before and after its Snake1d modules are switched to the kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

import sm90  # tests/gpu_worker/sm90.py
from tiny_codec import check_graph_replays, tiny_codec

from realtime_tts.gpu_worker import kernels
from realtime_tts.gpu_worker.kernels.snake import LAUNCH_OPTIONS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _alpha(num_channels: int, g: torch.Generator) -> torch.Tensor:
    # trained alphas are spread around 1; 0.05 keeps 1/alpha large, as a few real channels have it
    a = 0.05 + 2 * torch.rand(1, num_channels, 1, generator=g)
    return a.to(DEVICE)


def _check(out: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor) -> None:
    ref = kernels.snake_ref(x, alpha)
    assert out.shape == x.shape and out.dtype == x.dtype
    # the same fp32 op order: only the sin implementations (and a possible fused multiply-add) differ
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    exact = kernels.snake_ref(x.double(), alpha.double())
    assert float((out.double() - exact).abs().max()) <= 1e-5 * float(exact.abs().max())


@pytest.mark.parametrize("tile", [64, 1024])  # 1024: the CUDA tile; 64: many row and sample tile edges
@pytest.mark.parametrize("shape", [(3, 5, 37), (2, 7, 1), (1, 3, 1500), (2, 1, 2049), (2, 3, 4, 5)])
def test_snake_matches_reference(shape: tuple[int, ...], tile: int) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    x = (4 * torch.randn(*shape, generator=g)).to(DEVICE)
    alpha = _alpha(shape[1], g)
    _check(kernels.snake(x, alpha, tile=tile), x, alpha)


def test_snake_on_strided_and_transposed_inputs() -> None:
    g = torch.Generator().manual_seed(7)
    wide = (3 * torch.randn(2, 6, 90, generator=g)).to(DEVICE)
    alpha = _alpha(6, g)
    view = wide[:, :, 5:75]  # rows strided by 90, unit-stride samples
    _check(kernels.snake(view, alpha, tile=256), view, alpha)
    chans_last = (3 * torch.randn(2, 40, 6, generator=g)).to(DEVICE).transpose(1, 2)  # [2, 6, 40], t-stride 6
    _check(kernels.snake(chans_last, alpha, tile=64), chans_last, alpha)


def test_snake_is_per_channel() -> None:
    # one channel's alpha changed: only that channel's output moves
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 33, generator=g).to(DEVICE)
    alpha = _alpha(4, g)
    before = kernels.snake(x, alpha)
    alpha2 = alpha.clone()
    alpha2[0, 2, 0] += 0.5
    after = kernels.snake(x, alpha2)
    moved = (after != before).any(dim=2).any(dim=0)  # [4]
    assert moved.tolist() == [False, False, True, False]


def _assert_same_audio(out: np.ndarray, ref: np.ndarray, device: str) -> None:
    # CPU: fp32 convs, so only the activations' last-bit differences show. CUDA: the convs run in TF32, where
    # a last-bit change of an input can flip its 10-bit rounding; still far below any audible change.
    tol = 1e-5 if device == "cpu" else 1e-3
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * float(np.abs(ref).max()))


def _decode_before_and_after(codec: Any, lengths: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    grids = [torch.randint(0, 1024, (8, t), generator=g) for t in lengths]
    num_snakes = sum(1 for m in codec.model.modules() if type(m).__name__ == "Snake1d")
    stock = codec.decode(grids)
    assert kernels.use_fused_snake(codec.model) == num_snakes > 0
    assert kernels.use_fused_snake(codec.model) == 0  # idempotent
    assert all(type(m).__name__ != "Snake1d" for m in codec.model.modules())
    fused = codec.decode(grids)
    for a, b in zip(fused, stock, strict=True):
        _assert_same_audio(a, b, codec.device.type)
    assert kernels.use_fused_snake(codec.model, enabled=False) == num_snakes
    restored = codec.decode(grids)
    for a, b in zip(restored, stock, strict=True):
        np.testing.assert_array_equal(a, b)


def test_tiny_codec_decodes_the_same_audio_after_switching(tiny_checkpoint: Path) -> None:
    codec = tiny_codec(tiny_checkpoint, DEVICE)
    _decode_before_and_after(codec, (5, 5, 7))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tiny_codec_on_cuda_switched_and_graph_captured(tiny_checkpoint: Path) -> None:
    codec = tiny_codec(tiny_checkpoint, "cuda")
    _decode_before_and_after(codec, (10, 10, 17, 150))
    # the fused Snake modules, captured then replayed
    check_graph_replays(codec, kernels.use_fused_snake, lambda a, b: _assert_same_audio(a, b, "cuda"))


def test_kernel_builds_for_hopper_without_a_gpu() -> None:
    # The CPU tests run the interpreter (tl.sin); this builds the CUDA variants (libdevice sinf, IEEE division,
    # no FMA contraction) to PTX and SASS for sm_90 with Triton's bundled ptxas: the plain Snake, the codec
    # decoder's conv epilogues (bias; bias + skip + the pre-activation kept), and those epilogues in the
    # channels-last layout at each of its tiles. None may spill registers.
    sig = {n: "*fp32" for n in ("x_ptr", "bias_ptr", "skip_ptr", "alpha_ptr", "raw_ptr", "y_ptr")}
    sig |= {"len_ptr": "*i64"}
    sig |= {n: "i32" for n in ("num_rows", "rows_per_batch", "num_cols", "len_scale")}
    sig |= {f"stride_{t}{d}": "i64" for t in "xsry" for d in "br"}
    names = ("HAS_BIAS", "HAS_SKIP", "WRITE_RAW", "CHANNELS_LAST", "BLOCK_R", "BLOCK_C", "HAS_LEN", "PRECISE_SIN")
    sig |= {n: "constexpr" for n in names}
    variants = [(False, False, False, False, 4, 256, False), (True, False, False, False, 4, 256, False),
                (True, True, True, False, 4, 256, False), (True, False, False, True, 8, 128, False)]
    # the channels-last epilogue at each tile launch_snake picks for DAC's channel counts (96-1536)
    variants += [(True, True, True, True, 1024 // c, c, False) for c in (32, 64, 128)]
    # a padded codec batch's epilogues (the Snake output zeroed past each item's length), both layouts
    variants += [(True, True, True, False, 4, 256, True), (True, True, True, True, 8, 128, True)]
    specs = [{"kernel": "realtime_tts.gpu_worker.kernels.snake:_snake_kernel", "signature": sig,
              "constexprs": dict(zip(names, (*v, True), strict=True)), "options": LAUNCH_OPTIONS}
             for v in variants]
    for v, u in zip(variants, sm90.build(specs), strict=True):
        assert "div.rn.f32" in u["ptx"] and "sin.approx" not in u["ptx"], f"unexpected build {v}"
        # (the stack holds libdevice sinf's local array either way; spills are what ptxas reports as such)
        assert u["spill"] == 0, f"variant {v} spills {u['spill']} bytes ({u['regs']} registers)"
