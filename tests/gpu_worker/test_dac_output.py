"""The codec decoder's waveform head kernel (kernels/dac_output.py) against conv1d + tanh."""

from __future__ import annotations

import pytest
import sm90  # tests/gpu_worker/sm90.py
import torch
from tiny_codec import to_channels_last

from realtime_tts.gpu_worker.kernels.dac_output import tap_weights, wave_head, wave_head_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("tanh", [True, False])
@pytest.mark.parametrize(("channels", "ksize", "padding", "length", "block_t"),
                         [(32, 7, 3, 300, 128), (24, 7, 3, 37, 16), (8, 3, 0, 50, 32), (5, 5, 1, 70, 64)])
def test_wave_head_matches_conv_then_tanh(channels: int, ksize: int, padding: int, length: int,
                                          block_t: int, tanh: bool) -> None:
    """Every output sample (tile edges, both padded ends), channel counts that are and are not powers of two,
    convs that keep or shorten the length, with DAC's tanh and without it (HiggsAudioV2's identity)."""
    g = torch.Generator().manual_seed(channels + ksize)
    act = torch.randn(3, channels, length, generator=g)  # [B, C, T]
    weight = torch.randn(1, channels, ksize, generator=g) * 0.2  # pre-activations of order 1: tanh not saturated
    bias = torch.randn(1, generator=g) * 0.1
    ref = wave_head_ref(act, weight, bias, padding, tanh=tanh)
    out = wave_head(to_channels_last(act).to(DEVICE), tap_weights(weight).to(DEVICE), bias.to(DEVICE), padding,
                    tanh=tanh, block_t=block_t)
    assert out.shape == ref.shape and out.is_contiguous()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


def test_wave_head_reads_a_time_cropped_view() -> None:
    """act may be a view cut along T (any sample stride) of channels-last memory."""
    g = torch.Generator().manual_seed(3)
    full = torch.randn(2, 16, 90, generator=g)
    weight, bias = torch.randn(1, 16, 7, generator=g) * 0.2, torch.zeros(1)
    view = to_channels_last(full).to(DEVICE)[:, :, 10:-10]  # [2, 16, 70], channel stride 1, not contiguous
    assert view.stride(1) == 1 and not view.is_contiguous()
    out = wave_head(view, tap_weights(weight).to(DEVICE), bias.to(DEVICE), 3, block_t=32)
    torch.testing.assert_close(out.cpu(), wave_head_ref(full[:, :, 10:-10], weight, bias, 3), rtol=1e-5, atol=1e-5)


def test_wave_head_refuses_channels_first_memory() -> None:
    act = torch.randn(1, 8, 20, device=DEVICE)  # [B, C, T] with unit sample stride
    with pytest.raises(AssertionError, match="channels-last"):
        wave_head(act, tap_weights(torch.randn(1, 8, 7)).to(DEVICE), torch.zeros(1, device=DEVICE), 3)


def test_wave_head_builds_for_hopper_without_a_gpu() -> None:
    """The CUDA build (libdevice tanh) at the decoder's shape (32 channels, 7 taps) for sm_90: no spills."""
    sig = {"act_ptr": "*fp32", "w_ptr": "*fp32", "bias_ptr": "*fp32", "out_ptr": "*fp32", "in_len": "i32",
           "out_len": "i32", "stride_ab": "i64", "stride_at": "i64"}
    consts = {"NUM_CHANNELS": 32, "KSIZE": 7, "PAD": 3, "BLOCK_T": 128, "BLOCK_C": 32, "TANH": True,
              "PRECISE_TANH": True}
    sig |= {n: "constexpr" for n in consts}
    (u,) = sm90.build([{"kernel": "realtime_tts.gpu_worker.kernels.dac_output:_wave_head_kernel", "signature": sig,
                        "constexprs": consts, "options": {"num_warps": 4}}])
    assert u["spill"] == 0, f"spills {u['spill']} bytes ({u['regs']} registers)"
    assert "tanh.approx" not in u["ptx"], "libdevice tanh, not the approximate instruction"
