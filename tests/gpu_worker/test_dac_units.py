"""The one-kernel DAC residual unit (dac_units) against plain torch (CPU: Triton's interpreter, fp32 dots), the tiny
codec decoding with it switched in, and its sm_90 builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

import sm90  # tests/gpu_worker/sm90.py
from tiny_codec import assert_close_audio, decode_logged, tiny_codec, to_channels_last

from realtime_tts.gpu_worker.kernels import dac_units
from realtime_tts.gpu_worker.kernels.dac_decoder import fused_codec_state, fused_units_state, use_fused_codec
from realtime_tts.gpu_worker.kernels.dac_units import UnitLaunch, residual_unit, residual_unit_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _unit(channels: int, dilation: int, seed: int) -> Any:
    from transformers.models.dac.modeling_dac import DacResidualUnit

    torch.manual_seed(seed)
    unit: Any = DacResidualUnit(channels, dilation)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        unit.snake2.alpha.copy_(0.3 + 1.5 * torch.rand(unit.snake2.alpha.shape, generator=g))
        unit.conv1.bias.copy_(0.2 * torch.randn(channels, generator=g))
        unit.conv2.bias.copy_(0.2 * torch.randn(channels, generator=g))
    return unit.to(DEVICE)


@pytest.mark.parametrize(("channels", "dilation", "length", "t_block"), [
    (32, 1, 150, 64), (64, 3, 97, 128), (16, 9, 200, 64), (5, 3, 70, 64), (48, 9, 20, 64),
])
@pytest.mark.parametrize("keep_raw", [True, False])
def test_unit_kernel_matches_torch_with_a_cropped_skip(channels: int, dilation: int, length: int, t_block: int,
                                                      keep_raw: bool) -> None:
    # T not a multiple of the tile, a dilation reaching past both ends (zero padding), C below the dot's 16 lanes
    # (padded), and the skip a centre crop of a longer channels-last tensor, read in place
    unit = _unit(channels, dilation, channels + dilation)
    g = torch.Generator().manual_seed(length)
    act = to_channels_last(torch.randn(2, channels, length, generator=g)).to(DEVICE)  # [B, C, T], [B, T, C] memory
    wide = to_channels_last(torch.randn(2, channels, length + 8, generator=g)).to(DEVICE)
    alpha_next = (0.2 + torch.rand(1, channels, 1, generator=g)).to(DEVICE)
    with torch.no_grad():
        raw, y = residual_unit(unit, act, wide, alpha_next, keep_raw=keep_raw, launch=UnitLaunch(t_block=t_block))
        ref_raw, ref_y = residual_unit_ref(unit, act, wide, alpha_next)
    assert y.shape == ref_y.shape and y.stride(1) == 1
    # fp32 dots in the interpreter vs oneDNN's conv: another summation order; TF32 on CUDA
    rtol, atol = (1e-5, 1e-5) if DEVICE == "cpu" else (0.0, 1e-2)
    if keep_raw:
        assert raw is not None and raw.stride(1) == 1
        torch.testing.assert_close(raw, ref_raw, rtol=rtol, atol=atol)
    else:
        assert raw is None
    torch.testing.assert_close(y, ref_y, rtol=rtol, atol=atol)


def test_unit_kernel_is_per_batch_and_sees_each_tap() -> None:
    # one input sample changed: only the outputs within the dilated conv's reach of it move, in that batch item
    unit = _unit(32, 3, 1)
    g = torch.Generator().manual_seed(2)
    act = to_channels_last(torch.randn(2, 32, 130, generator=g)).to(DEVICE)
    skip = to_channels_last(torch.randn(2, 32, 130, generator=g)).to(DEVICE)
    alpha = torch.ones(1, 32, 1, device=DEVICE)
    with torch.no_grad():
        _, y0 = residual_unit(unit, act, skip, alpha, launch=UnitLaunch(t_block=64))
        act2 = act.clone()
        act2[1, 5, 64] += 1.0
        _, y1 = residual_unit(unit, act2, skip, alpha, launch=UnitLaunch(t_block=64))
    moved = (y1 != y0).any(dim=1)  # [B, T]
    assert not moved[0].any()
    assert moved[1].nonzero().flatten().tolist() == [64 + 3 * k for k in range(-3, 4)]


def test_weights_are_cached_and_follow_changes() -> None:
    unit = _unit(16, 1, 3)
    w1, w2 = dac_units.unit_weights(unit)
    assert w1.shape == (7, 16, 16) and w2.shape == (16, 16)
    assert dac_units.unit_weights(unit)[0] is w1
    with torch.no_grad():
        unit.conv1.weight.mul_(2)
    w1b, _ = dac_units.unit_weights(unit)
    assert w1b is not w1
    torch.testing.assert_close(w1b[3], 2 * w1[3])
    assert not any("fused_unit" in k for k in unit.state_dict())


def test_tiny_codec_decodes_the_same_audio_with_fused_units(tiny_checkpoint: Path) -> None:
    codec = tiny_codec(tiny_checkpoint, DEVICE)
    model = codec.model
    decoder = model.acoustic_decoder
    units = [u for blk in decoder.block for u in (blk.res_unit1, blk.res_unit2, blk.res_unit3)]
    # every unit takes the kernel: channels <= 64, dilations 1/3/9
    assert all(dac_units.unit_fits(u) for u in units)
    assert {u.conv1.dilation[0] for u in units} == {1, 3, 9}
    g = torch.Generator().manual_seed(6)
    grids = [torch.randint(0, 1024, (8, t), generator=g) for t in (5, 5, 7)]
    keys = list(model.state_dict())
    stock = codec.decode(grids)
    with pytest.raises(ValueError, match="channels_last"):
        use_fused_codec(model, fused_units=True)
    assert use_fused_codec(model, channels_last=True) == 1
    cl = codec.decode(grids)
    assert use_fused_codec(model, channels_last=True, fused_units=True) == 1  # relaid: counted
    assert use_fused_codec(model, channels_last=True, fused_units=True) == 0  # idempotent
    assert fused_codec_state(model) == (True, True)
    assert fused_units_state(model)
    assert all("_fused_unit_weights" in u.__dict__ for u in units)  # made at switch time
    assert list(model.state_dict()) == keys
    fused = codec.decode(grids)
    for a, c, r in zip(fused, cl, stock, strict=True):
        assert a.shape == r.shape
        assert_close_audio(a, r, DEVICE)
        assert not np.array_equal(a, c)  # it did take the other path
    assert use_fused_codec(model, channels_last=True) == 1  # units off, channels-last kept
    assert not fused_units_state(model)
    assert not any("_fused_unit_weights" in u.__dict__ for u in units)
    for a, c in zip(codec.decode(grids), cl, strict=True):
        np.testing.assert_array_equal(a, c)
    assert use_fused_codec(model, channels_last=True, fused_units=True) == 1
    assert use_fused_codec(model, enabled=False) == 1
    assert not fused_units_state(model) and fused_codec_state(model) == (False, False)
    for a, r in zip(codec.decode(grids), stock, strict=True):
        np.testing.assert_array_equal(a, r)


def test_fused_units_leave_only_the_other_convs_to_torch(tiny_checkpoint: Path) -> None:
    # with every unit fused, torch runs only conv1 and each block's upsampling conv (conv2 + the final activation:
    # the waveform head kernel, dac_output)
    codec = tiny_codec(tiny_checkpoint, "cpu")
    decoder = codec.model.acoustic_decoder
    stock, wave, ops = decode_logged(codec, lambda m: use_fused_codec(m, channels_last=True, fused_units=True))
    assert len([name for name, _ in ops if "conv" in name]) == 1 + len(decoder.block)
    assert wave.shape == stock.shape and wave.is_contiguous()
    torch.testing.assert_close(wave, stock, rtol=1e-5, atol=1e-5 * float(stock.abs().max()))


def _unit_build(channels: int, t_block: int, num_warps: int, keep_raw: bool, has_len: bool = False) -> dict[str, Any]:
    names = ("act_ptr", "skip_ptr", "w1_ptr", "b1_ptr", "alpha2_ptr", "w2_ptr", "b2_ptr", "alpha_next_ptr",
             "raw_ptr", "y_ptr")
    sig = {n: "*fp32" for n in names} | {"len_ptr": "*i64"}
    sig |= {n: "i32" for n in ("length", "dilation", "padding", "len_scale")}
    sig |= {f"stride_{t}{d}": "i64" for t in "asry" for d in "bt"}
    consts = {"C": channels, "BLOCK_C": channels, "KSIZE": 7, "WRITE_RAW": keep_raw, "HAS_LEN": has_len,
              "T_BLOCK": t_block, "PRECISE_SIN": True}
    sig |= {n: "constexpr" for n in consts}
    return {"kernel": "realtime_tts.gpu_worker.kernels.dac_units:_res_unit_kernel", "signature": sig,
            "constexprs": consts, "divisible": list(names),
            "options": {"num_warps": num_warps, "num_stages": 1, "enable_fp_fusion": False}}


@pytest.mark.slow
def test_unit_kernel_builds_for_hopper_without_spills() -> None:
    # C = 32 and 64 (the full decoder's last two stages; 16: the tiny codec's GPU test): TF32 wgmma dots, IEEE
    # division and libdevice sinf in the Snakes, no register spills, within the 227 KB of shared memory. The
    # defaults, the alternatives the H200 timed (64/4 and 128/8 at every C), and the default without the raw store.
    configs = [(c, dac_units.UNIT_LAUNCH[c].t_block, dac_units.UNIT_LAUNCH[c].num_warps, True) for c in (16, 32, 64)]
    configs += [(c, tb, w, True) for c in (32, 64) for tb, w in ((64, 4), (128, 8))]
    configs.append((64, dac_units.UNIT_LAUNCH[64].t_block, dac_units.UNIT_LAUNCH[64].num_warps, False))
    configs = list(dict.fromkeys(configs))
    # the defaults in a padded codec batch (the output zeroed past each item's length)
    configs += [(c, dac_units.UNIT_LAUNCH[c].t_block, dac_units.UNIT_LAUNCH[c].num_warps, True, True)
                for c in (32, 64)]
    for cfg, u in zip(configs, sm90.build([_unit_build(*c) for c in configs]), strict=True):
        ptx = u["ptx"]
        # all eight dots (7 taps + the 1x1) as TF32 wgmma (C=64, T_BLOCK 64, 4 warps: 64 m64n64k8 instructions)
        assert ptx.count("wgmma.mma_async") >= 8 and ".f32.tf32.tf32" in ptx, f"{cfg}: no TF32 wgmma"
        assert "div.rn.f32" in ptx and "sin.approx" not in ptx, cfg
        assert u["spill"] == 0, f"{cfg} spills {u['spill']} bytes ({u['regs']} registers)"
        assert u["shared"] <= 232448, f"{cfg} needs {u['shared']} bytes of shared memory"
