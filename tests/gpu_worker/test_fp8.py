"""FP8 projections (kernels/fp8.py, StepRunner(fp8_matmuls=True), an experiment): the per-row quantisation and its reference on
any device, the Triton pass and torch._scaled_mm against the reference on an FP8-capable GPU, and the fused
backbone with fp8=True next to its bf16 self there. On a machine without such a GPU the runner refuses the flag
with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from realtime_tts.gpu_worker import kernels
from realtime_tts.gpu_worker.runner import FusedBackbone, StepRunner
from realtime_tts.model.network import OmniVoiceModel

FP8_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(out).all(), "non-finite output"
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))


def test_rows_quantise_to_e4m3_with_the_row_max_at_448() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 96, generator=g) * torch.logspace(-3, 3, 7)[:, None]  # rows six decades apart
    x[3] = 0.0  # a row of zeros stays zeros
    q, s = kernels.quantize_rows_ref(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (7, 1) and s.dtype == torch.float32
    back = q.float() * s
    assert back[3].abs().max() == 0
    live = [r for r in range(7) if r != 3]
    assert torch.allclose(q.float().abs().amax(1)[live], torch.full((6,), 448.0))
    # e4m3 keeps 3 mantissa bits: every element within half an ulp (1/16 relative) of the value, or of 2^-9 × scale
    err = (back - x).abs()
    assert (err <= x.abs() / 16 + s * 2.0 ** -9 + 1e-30).all()
    assert rel_err(back[live], x[live]) < 0.04


def test_weights_quantise_per_output_row_and_the_reference_product_stays_close() -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(48, 64, generator=g) * torch.linspace(0.01, 10, 48)[:, None]
    x = torch.randn(33, 64, generator=g)
    w_q, w_s = kernels.quantize_weight(w)
    assert w_q.shape == w.shape and w_s.shape == (1, 48)
    out = kernels.fp8_linear_ref(x, w_q, w_s, out_dtype=torch.float32)
    assert rel_err(out, x @ w.t()) < 0.06  # two e4m3 operands: a few percent, well short of noise


@pytest.mark.skipif(FP8_GPU, reason="checks the refusal on a machine without FP8 tensor cores")
def test_the_runner_refuses_fp8_without_an_fp8_gpu(tiny_checkpoint: Path) -> None:
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cpu", load_codec=False)
    with pytest.raises(ValueError, match="fp8_matmuls needs"):
        StepRunner(model, fp8_matmuls=True)


@pytest.mark.gpu
@pytest.mark.skipif(not FP8_GPU, reason="needs a CUDA GPU with FP8 tensor cores (sm89+)")
@pytest.mark.parametrize("shape", [(1, 1024), (300, 1024), (4096, 2048), (517, 3072)])
def test_triton_quantisation_and_scaled_mm_match_the_reference_on_gpu(shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(2)
    m, k = shape
    x = (torch.randn(m, k, generator=g) * torch.logspace(-2, 2, m)[:, None]).to("cuda", torch.bfloat16)
    q, s = kernels.quantize_rows(x)
    q_ref, s_ref = kernels.quantize_rows_ref(x)
    assert torch.allclose(s, s_ref, rtol=1e-6, atol=0)
    # the same rounding, but for a last-bit difference in x / scale on a few elements
    assert (q.float() != q_ref.float()).float().mean() < 1e-3
    w = torch.randn(640, k, generator=g).to("cuda", torch.bfloat16)
    w_q, w_s = kernels.quantize_weight(w)
    out = kernels.fp8_linear(x, w_q, w_s)
    assert out.dtype == torch.bfloat16 and out.shape == (m, 640)
    assert rel_err(out, kernels.fp8_linear_ref(x, w_q, w_s, out_dtype=torch.float32)) < 1e-2
    assert rel_err(out, x.float() @ w.float().t()) < 0.06


@pytest.mark.gpu
@pytest.mark.skipif(not FP8_GPU, reason="needs a CUDA GPU with FP8 tensor cores (sm89+)")
def test_fp8_backbone_stays_near_the_bf16_backbone_on_gpu(tiny_checkpoint: Path) -> None:
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.bfloat16, device="cuda", load_codec=False)
    bf16 = FusedBackbone(model, residual_dtype=torch.bfloat16, attention="split")
    fp8 = FusedBackbone(model, residual_dtype=torch.bfloat16, attention="split", fp8=True)
    g = torch.Generator().manual_seed(3)
    lengths = [40, 97, 160, 23]
    n = sum(lengths)
    embeds = torch.randn(n, model.llm.cfg["hidden_size"], generator=g).to("cuda", torch.bfloat16)
    positions = torch.cat([torch.arange(length) for length in lengths]).to("cuda")
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    ref = bf16(embeds, positions, cu, max(lengths))
    out = fp8(embeds, positions, cu, max(lengths))
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert 0 < rel_err(out, ref) < 0.1  # FP8 moves the hidden state (it is not bf16), but only by a few percent
