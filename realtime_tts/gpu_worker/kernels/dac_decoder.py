"""The codec decoder's conv epilogues in one pass each (a conv's bias add, the residual add, the next Snake), the
decoder forward around them (NCHW, or channels-last end to end, optionally with dac_units' one-kernel residual
units), and the switch that points a loaded codec's DAC decoder at it (or back) in place.

Worker processes only (torch, triton); never edits or imports from transformers' modeling files.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from realtime_tts.gpu_worker.kernels import dac_output, dac_units
from realtime_tts.gpu_worker.kernels.module_switch import ForwardSwitch, derived, drop_derived
from realtime_tts.gpu_worker.kernels.snake import _INTERPRET, _TILE, launch_snake, snake_ref, unit_stride
from realtime_tts.model.codec_batch import masked_decoder_walk, pad_mask


def conv_epilogue(x: torch.Tensor, bias: torch.Tensor | None, alpha: torch.Tensor, skip: torch.Tensor | None = None,
                  keep_raw: bool = False, inplace: bool = False, tile: int = _TILE,
                  channels_last: bool = False, lengths: torch.Tensor | None = None,
                  scale: int = 1) -> tuple[torch.Tensor | None, torch.Tensor]:
    """x: [B, C, T] a conv's output without its bias; bias: [C] or None; alpha: [1, C, 1]; skip: [B, C, T] or None
    → (raw, y): raw = skip + (x + bias) (None unless keep_raw), y = snake(raw), in x's memory layout.

    channels_last=True: x and skip are [B, C, T] views of [B, T, C] memory (channel stride 1, e.g. a
    channels_last [B, C, 1, T] conv output squeezed). inplace=True: x is the caller's scratch (a conv output nobody
    else holds) and takes raw, or y when raw is not kept. x and skip may be cut along T (a strided view,
    read in place). lengths [B] int64 (a padded codec batch): y is 0 past sample lengths[b] · scale of item b (raw
    is not masked). No host syncs.
    """
    assert x.dim() == 3, f"x must be [B, C, T], got {tuple(x.shape)}"
    num_channels = x.shape[1]
    fast_dim = 1 if channels_last else 2
    x = unit_stride(x, fast_dim)  # a copy, if one is made, is scratch too
    assert alpha.numel() == num_channels, f"alpha has {alpha.numel()} values for {num_channels} channels"
    alpha_flat = alpha.reshape(num_channels).contiguous()
    bias_flat = bias.reshape(num_channels).contiguous() if bias is not None else None
    if skip is not None:
        assert skip.shape == x.shape, f"skip {tuple(skip.shape)} does not match x {tuple(x.shape)}"
        skip = unit_stride(skip, fast_dim)
    # empty_like keeps x's strides (x is dense): the outputs share its layout
    raw = (x if inplace else torch.empty_like(x)) if keep_raw else None  # [B, C, T]
    y = x if inplace and not keep_raw else torch.empty_like(x)  # [B, C, T]
    launch_snake(x, alpha_flat, y, tile, bias=bias_flat, skip=skip, raw=raw, channels_last=channels_last,
                 lengths=lengths, scale=scale)
    return raw, y


def conv_epilogue_ref(x: torch.Tensor, bias: torch.Tensor | None, alpha: torch.Tensor,
                      skip: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The stock decoder's ops (plain torch): (raw, snake(raw)) with raw = skip + (x + bias)."""
    raw = x.clone()
    if bias is not None:
        raw.add_(bias.reshape(1, -1, 1))
    if skip is not None:
        raw = skip + raw
    return raw, snake_ref(raw, alpha)


# ------------------------------------------------------------------------------------------------ the decoder


def _conv(conv: Any, x: torch.Tensor) -> torch.Tensor:
    """The module's conv without its bias (the epilogue adds it): the same cuDNN call the stock forward makes,
    which then adds the bias in a separate kernel."""
    if conv.transposed:  # ConvTranspose1d (checked by _is_dac_decoder)
        output_padding = conv._output_padding(x, None, conv.stride, conv.padding, conv.kernel_size, 1, conv.dilation)
        return F.conv_transpose1d(x, conv.weight, None, conv.stride, conv.padding, output_padding, conv.groups,
                                  conv.dilation)
    out: torch.Tensor = conv._conv_forward(x, conv.weight, None)
    return out


# The channels-last decoder runs each conv as the 2-D op on [B, C, 1, T] in torch.channels_last memory ([B, T, C]),
# where cuDNN's TF32 conv kernels work natively (NCHW tensors cost it a layout conversion on each side of every
# conv). Each conv's weight in that form is cached on the conv module as a plain attribute (not a parameter or
# buffer: the state dict does not change), made at switch time and remade if the weight changes.
_CL_FLAG = "_fused_channels_last"
# channels-last decoders only: residual units with C <= dac_units.MAX_UNIT_CHANNELS run as one kernel each
_UNITS_FLAG = "_fused_units"
_CL_WEIGHT = "_fused_channels_last_weight"
# channels-last decoders: conv2 (C → 1 channel) + tanh as one kernel (dac_output.wave_head), its taps cached here
_WAVE_TAPS = "_fused_wave_taps"


def _cl_weight(conv: Any) -> torch.Tensor:
    """conv's weight [O, I, K] (transposed: [I, O, K]) as [O, I, 1, K] in channels_last memory, cached."""
    w: torch.Tensor = conv.weight

    def make() -> torch.Tensor:
        return w.detach().unsqueeze(2).contiguous(memory_format=torch.channels_last)  # [O, I, 1, K]

    return derived(conv, _CL_WEIGHT, (w,), make)


def _wave_taps(conv: Any) -> torch.Tensor | None:
    """conv2's weight as dac_output.wave_head reads it ([K, C] fp32), cached like _cl_weight; None when the conv
    is not a plain one-output conv (then cuDNN runs it)."""
    if not (conv.out_channels == 1 and conv.stride == (1,) and conv.dilation == (1,) and conv.groups == 1
            and isinstance(conv.padding, tuple)):
        return None
    w = conv.weight
    return derived(conv, _WAVE_TAPS, (w,), lambda: dac_output.tap_weights(w.detach()))


def _conv_cl(conv: Any, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [B, C, T] in [B, T, C] memory → the module's conv of it (bias only when given) as [B, C', T'] in
    [B, T', C'] memory: the 2-D op on the [B, C, 1, T] channels_last view, no copies."""
    x4 = x.unsqueeze(2)  # [B, C, 1, T], channels_last strides
    w4 = _cl_weight(conv)
    if conv.transposed:
        out = F.conv_transpose2d(x4, w4, bias, (1, conv.stride[0]), (0, conv.padding[0]),
                                 (0, conv.output_padding[0]), conv.groups, (1, conv.dilation[0]))
    else:
        padding = conv.padding if isinstance(conv.padding, str) else (0, conv.padding[0])
        out = F.conv2d(x4, w4, bias, (1, conv.stride[0]), padding, (1, conv.dilation[0]), conv.groups)
    return out.squeeze(2)  # [B, C', T']


def _units(block: Any) -> list[Any]:
    return [block.res_unit1, block.res_unit2, block.res_unit3]


def _fused_forward(self: Any, hidden_state: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """The decoder's forward (hidden_state [B, D, T] → [B, 1, hop·T]). lengths [B] int64 (frames, on the device):
    a padded batch (model/codec_batch.py): every Snake output that feeds a temporal conv is zeroed past its item's
    valid length at that resolution, inside the epilogue or unit kernel that makes it, so each item's valid
    samples are its unpadded decode's; the raw residual stream past it is left as it is (it only meets
    per-sample ops)."""
    if not (hidden_state.is_cuda or _INTERPRET) or hidden_state.dtype != torch.float32:
        # CPU without the interpreter, or another dtype (the stock ops would round between ops): stock path
        if lengths is not None:
            return masked_decoder_walk(self, hidden_state, lengths)
        stock: torch.Tensor = _SWITCH.stock_class(type(self)).forward(self, hidden_state)
        return stock
    channels_last = bool(self.__dict__.get(_CL_FLAG, False))
    fused_units = channels_last and bool(self.__dict__.get(_UNITS_FLAG, False))
    conv: Callable[[Any, torch.Tensor], torch.Tensor] = _conv_cl if channels_last else _conv
    scale = 1  # samples per frame at the current stage
    if lengths is not None:  # the decoder's input past each length: whatever the padded codes decoded to
        hidden_state = hidden_state.masked_fill(pad_mask(lengths, 1, hidden_state.shape[-1]), 0.0)
    if channels_last:
        # the one conversion in: [B, D, T] → [B, T, D] memory; every activation after it stays channels-last
        hidden_state = hidden_state.unsqueeze(2).contiguous(memory_format=torch.channels_last).squeeze(2)
    blocks: list[Any] = list(self.block)
    # Every Snake1d's alpha in the order the decoder applies them; each conv's epilogue ends in the next one.
    alphas = [m.alpha for blk in blocks for m in [blk.snake1] + [s for u in _units(blk) for s in (u.snake1, u.snake2)]]
    alphas.append(self.snake1.alpha)
    nxt = iter(alphas)
    # With lengths, each epilogue (and fused unit) whose Snake output feeds a temporal conv zeroes it past the valid
    # length in the same pass (the unit's inner Snake feeds its 1x1 conv: per sample, left as it is).
    _, act = conv_epilogue(conv(self.conv1, hidden_state), self.conv1.bias, next(nxt), inplace=True,
                           channels_last=channels_last, lengths=lengths, scale=scale)  # [B, C0, T]
    for blk in blocks:
        scale *= blk.conv_t1.stride[0]
        # the upsampling conv's output is both the first unit's Snake input and its skip
        skip, act = conv_epilogue(conv(blk.conv_t1, act), blk.conv_t1.bias, next(nxt), keep_raw=True,
                                  inplace=True, channels_last=channels_last, lengths=lengths,
                                  scale=scale)  # [B, C, T·stride] each
        units = _units(blk)
        for i, unit in enumerate(units):
            keep = i < len(units) - 1  # the last unit's sum only feeds the next block's (or the decoder's) Snake
            if fused_units and dac_units.unit_fits(unit):
                next(nxt)  # snake2's alpha: the kernel reads it from the unit
                assert skip is not None
                skip, act = dac_units.residual_unit(unit, act, skip, next(nxt), keep_raw=keep, lengths=lengths,
                                                    scale=scale)
                continue
            _, act = conv_epilogue(conv(unit.conv1, act), unit.conv1.bias, next(nxt), inplace=True,
                                   channels_last=channels_last)
            out = conv(unit.conv2, act)  # [B, C, T']
            assert skip is not None
            skip = dac_units.center_crop(skip, out.shape[-1])
            skip, act = conv_epilogue(out, unit.conv2.bias, next(nxt), skip=skip, keep_raw=keep,
                                      inplace=True, channels_last=channels_last, lengths=lengths, scale=scale)
    taps = _wave_taps(self.conv2) if channels_last and self.conv2.bias is not None else None
    if taps is not None:  # conv2 + bias (+ tanh) in one pass, straight into the [B, 1, T_wave] waveform
        # DAC ends in nn.Tanh; HiggsAudioV2's tokenizer swaps it for nn.Identity (unbounded waveforms)
        tanh = type(self.tanh) is torch.nn.Tanh
        wave = dac_output.wave_head(act, taps, self.conv2.bias, self.conv2.padding[0], tanh=tanh)
        if tanh or type(self.tanh) is torch.nn.Identity:
            return wave
        other: torch.Tensor = self.tanh(wave)  # any other final module: applied as the stock forward does
        return other
    if channels_last:
        # bias and all, as the stock conv2; with one output channel [B, 1, T] memory is both layouts: the conversion
        # out is free (.contiguous() is a no-op, kept as the guarantee)
        hidden_state = _conv_cl(self.conv2, act, self.conv2.bias).contiguous()  # [B, 1, T_wave]
    else:
        hidden_state = self.conv2(act)  # stock, bias and all: its 1-channel output is the waveform
    out_wave: torch.Tensor = self.tanh(hidden_state)
    return out_wave


# accepts_lengths: model/codec_batch.decode_padded passes a padded batch's lengths to this forward
_SWITCH = ForwardSwitch(_fused_forward, __name__, attrs={"accepts_lengths": True})


def _is_snake(m: object, channels: int) -> bool:
    alpha = getattr(m, "alpha", None)
    return isinstance(alpha, torch.Tensor) and tuple(alpha.shape) == (1, channels, 1)


def _is_conv(m: Any, transposed: bool = False) -> bool:
    kind = torch.nn.ConvTranspose1d if transposed else torch.nn.Conv1d
    return type(m) is kind and m.padding_mode == "zeros"


def _is_dac_decoder(module: Any) -> bool:
    """DAC's decoder in exactly the layout the fused forward walks: conv1, blocks of (Snake1d, ConvTranspose1d,
    three residual units of Snake1d, Conv1d, Snake1d, Conv1d), Snake1d, conv2 — all with their stock forwards
    and no hooks (a forward pre-hook, e.g. old-style weight norm, would be skipped by the fused walk)."""
    if _SWITCH.stock_class(type(module)).__name__ != "DacDecoder":
        return False
    if any(m._forward_hooks or m._forward_pre_hooks for m in module.modules()):
        return False
    try:
        blocks = list(module.block)
        if not (blocks and _is_conv(module.conv1) and _is_conv(module.conv2)
                and _is_snake(module.snake1, module.conv2.in_channels)):
            return False
        channels = module.conv1.out_channels
        for blk in blocks:
            if type(blk).__name__ != "DacDecoderBlock" or not (_is_snake(blk.snake1, channels)
                                                               and _is_conv(blk.conv_t1, transposed=True)):
                return False
            channels = blk.conv_t1.out_channels
            for unit in _units(blk):
                if type(unit).__name__ != "DacResidualUnit" or not (
                        _is_snake(unit.snake1, channels) and _is_conv(unit.conv1) and _is_snake(unit.snake2, channels)
                        and _is_conv(unit.conv2) and unit.conv2.out_channels == channels):
                    return False
        return bool(channels == module.conv2.in_channels)
    except AttributeError:
        return False


def use_fused_codec(model: torch.nn.Module, enabled: bool = True, channels_last: bool = False,
                    fused_units: bool = False) -> int:
    """Switch every DAC decoder under `model` (e.g. a codec's HiggsAudioV2TokenizerModel) to the fused epilogues
    (channels_last=True: with every activation in channels-last memory, the convs as 2-D channels_last ops), or
    back to transformers' stock forward with enabled=False → how many decoders changed (class or layout).

    In place, by class, as use_fused_snake does: the decoder becomes an instance of a subclass of its own class
    that only overrides forward, so parameters, state-dict keys and isinstance checks stay. Idempotent. The fused
    forward reads the decoder's Snake1d alphas itself, so it does not matter whether use_fused_snake switched
    those modules; the encoder's Snake1d modules are use_fused_snake's alone.

    fused_units=True (channels_last only): each residual unit with at most dac_units.MAX_UNIT_CHANNELS channels
    runs as one Triton kernel (conv7 + bias + Snake + conv1x1 + bias + skip + next Snake), its weights prepared
    now (plain attributes: the state dict does not change); wider units keep cuDNN + the epilogue kernel.
    """
    if fused_units and not (enabled and channels_last):
        raise ValueError("fused_units=True needs enabled=True and channels_last=True")
    changed = 0
    for module in model.modules():
        if not _is_dac_decoder(module):
            continue
        switched = _SWITCH.apply(module, lambda m, d=module: m is d, enabled)  # type: ignore[misc]
        want = enabled and channels_last
        relaid = (want != bool(module.__dict__.get(_CL_FLAG, False))
                  or fused_units != bool(module.__dict__.get(_UNITS_FLAG, False)))
        blocks: Any = module.block
        units = [u for blk in blocks for u in _units(blk)]
        if fused_units:
            module.__dict__[_UNITS_FLAG] = True
            for unit in units:
                if dac_units.unit_fits(unit):
                    dac_units.unit_weights(unit)
        else:
            module.__dict__.pop(_UNITS_FLAG, None)
            for unit in units:
                dac_units.drop_unit_weights(unit)
        if want:
            module.__dict__[_CL_FLAG] = True
            for conv in module.modules():  # the weights converted once, now
                if isinstance(conv, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
                    _cl_weight(conv)
            _wave_taps(module.conv2)
        else:
            module.__dict__.pop(_CL_FLAG, None)
            for conv in module.modules():
                drop_derived(conv, _CL_WEIGHT)
                drop_derived(conv, _WAVE_TAPS)
        changed += bool(switched or relaid)
    return changed


def fused_codec_state(model: torch.nn.Module) -> tuple[bool, bool]:
    """(fused, channels_last) as use_fused_codec last left the DAC decoders under `model` (any of them), so a
    caller that switches them for a while (the bench) can put them back."""
    decoders = [m for m in model.modules() if _is_dac_decoder(m)]
    fused = any(type(m) is not _SWITCH.stock_class(type(m)) for m in decoders)
    return fused, any(m.__dict__.get(_CL_FLAG, False) for m in decoders)


def fused_units_state(model: torch.nn.Module) -> bool:
    """Whether use_fused_codec last left any DAC decoder under `model` with its residual units fused."""
    return any(m.__dict__.get(_UNITS_FLAG, False) for m in model.modules() if _is_dac_decoder(m))
