"""The CFG/argmax scoring kernels (both variants) against cfg_argmax_ref: on CPU through Triton's interpreter,
on CUDA native. Shapes are small; the cases are the ones a tiled kernel with a peeled last column can get wrong."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

triton = pytest.importorskip("triton")

import sm90  # tests/gpu_worker/sm90.py

from realtime_tts.gpu_worker import kernels
from realtime_tts.gpu_worker.kernels.scoring import cfg_log_probs_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.bfloat16]
# (variant, rows_per_program, num_warps): the legacy kernel, and the tiled one at row counts that do and do not
# divide the test's position count
CONFIGS = [("legacy", 1, 4), ("rows", 1, 1), ("rows", 2, 1), ("rows", 4, 1), ("rows", 8, 2), ("rows", 16, 4)]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def logits(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return (3 * torch.randn(*shape, generator=g)).to(DEVICE, dtype)


def check(c: torch.Tensor, u: torch.Tensor, guidance: torch.Tensor, mask_id: int, variant: str, rows: int,
          warps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel equals the reference on the same logits: confidences to fp32 rounding, and the fp32
    reference's tokens except where float64 says the two tokens tie (bf16 logits give exact ties, which fp32
    rounding of the normalisers breaks either way: ~4 in 10^4 positions at V = 1025, for the legacy kernel as
    for this one); every token is a float64 maximiser either way."""
    pred, conf = kernels.cfg_argmax(c, u, guidance, mask_id, variant=variant, rows_per_program=rows,
                                    num_warps=warps)
    ref_pred, ref_conf = kernels.cfg_argmax_ref(c, u, guidance, mask_id)
    lp64 = cfg_log_probs_ref(c, u, guidance.double(), mask_id, torch.float64)  # [B, R, V]
    assert pred.dtype == torch.long and conf.dtype == torch.float32
    assert not (pred == mask_id).any(), "MASK is never chosen"
    torch.testing.assert_close(conf, ref_conf, atol=1e-5, rtol=1e-5)
    best64 = lp64.max(dim=-1).values
    torch.testing.assert_close(conf.double(), best64, atol=5e-5, rtol=1e-5)
    ours, theirs = lp64.gather(-1, pred[..., None])[..., 0], lp64.gather(-1, ref_pred[..., None])[..., 0]
    differ = pred != ref_pred
    assert ((ours - theirs).abs()[differ] < 1e-9).all(), "a token differs from the reference's without a tie"
    assert (ours > best64 - 1e-9).all(), "a token is not the argmax"
    return pred, conf


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-r{c[1]}w{c[2]}")
@pytest.mark.parametrize("vocab,mask_id", [(1025, 1024), (17, 16), (37, 5), (100, 0), (2, 1)])
def test_cfg_argmax_equals_reference(dtype: torch.dtype, config: tuple[str, int, int], vocab: int,
                                     mask_id: int) -> None:
    g = gen(vocab)
    # 3 items x 7 positions = 21 rows: not a multiple of any rows_per_program above but 1
    c, u = logits(g, (3, 7, vocab), dtype), logits(g, (3, 7, vocab), dtype)
    c[:, 0, mask_id] = 100.0  # MASK holds the max logit of every item's first position: it must be excluded
    u[1, 1, mask_id] = 100.0  # ... and in uncond only: it still counts in the normalisers
    guidance = torch.tensor([2.0, 0.0, 0.5], device=DEVICE)  # g == 0: plain cond log-softmax, beside g != 0
    check(c, u, guidance, mask_id, *config)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-r{c[1]}w{c[2]}")
@pytest.mark.parametrize("vocab,mask_id", [(1025, 1024), (33, 3), (12, 11)])
def test_cfg_argmax_ties_go_to_the_lowest_id(dtype: torch.dtype, config: tuple[str, int, int], vocab: int,
                                            mask_id: int) -> None:
    g = gen(100 + vocab)
    c, u = logits(g, (2, 6, vocab), dtype), logits(g, (2, 6, vocab), dtype)
    last = vocab - 1
    # Identical (cond, uncond) columns score identically at every step of the op sequence: exact ties.
    top = [(2, 7), (0, last), (mask_id, 4), (1, 2), (5, 9), (3, last)]  # per position: tied columns a, b
    for pos, (a, b) in enumerate(top):
        c[:, pos, [a, b]] = 20.0
        u[:, pos, [a, b]] = -5.0
    guidance = torch.tensor([1.5, 0.0], device=DEVICE)
    pred, _ = check(c, u, guidance, mask_id, *config)
    want = [min(x for x in (a, b) if x != mask_id) for a, b in top]  # MASK in a pair: the other one wins
    assert pred.tolist() == [want, want]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", CONFIGS[:3], ids=lambda c: f"{c[0]}-r{c[1]}w{c[2]}")
def test_cfg_argmax_last_column_wins_when_it_is_not_mask(dtype: torch.dtype, config: tuple[str, int, int]) -> None:
    """The peeled last column is a real token when MASK sits elsewhere; when it is MASK it never wins."""
    g = gen(7)
    vocab = 1025
    c, u = logits(g, (2, 5, vocab), dtype), logits(g, (2, 5, vocab), dtype)
    c[:, :, vocab - 1] = 30.0
    guidance = torch.tensor([2.0, 0.0], device=DEVICE)
    pred, _ = check(c, u, guidance, 7, *config)
    assert (pred == vocab - 1).all()
    pred, _ = check(c, u, guidance, vocab - 1, *config)
    assert (pred != vocab - 1).all()


@pytest.mark.parametrize("config", CONFIGS[1:3], ids=lambda c: f"{c[0]}-r{c[1]}w{c[2]}")
def test_cfg_argmax_strided_logits_and_empty(config: tuple[str, int, int]) -> None:
    """Row strides other than V (a view into wider rows, as a head's [.., 8·V] output sliced would give), and
    zero positions."""
    g = gen(9)
    wide = logits(g, (2, 5, 1040), torch.float32)
    c, u = wide[..., :1025], logits(g, (2, 5, 1025), torch.float32)
    check(c, u, torch.tensor([2.0, 1.0], device=DEVICE), 1024, *config)
    empty = torch.empty(2, 0, 1025, device=DEVICE)
    pred, conf = kernels.cfg_argmax(empty, empty, torch.tensor([2.0, 1.0], device=DEVICE), 1024,
                                    variant=config[0], rows_per_program=config[1], num_warps=config[2])
    assert pred.shape == (2, 0) and conf.shape == (2, 0)


def test_cfg_argmax_rejects_bad_options() -> None:
    x = torch.zeros(1, 1, 5, device=DEVICE)
    with pytest.raises(ValueError, match="variant"):
        kernels.cfg_argmax(x, x, torch.ones(1, device=DEVICE), 4, variant="fast")
    with pytest.raises(ValueError, match="rows_per_program"):
        kernels.cfg_argmax(x, x, torch.ones(1, device=DEVICE), 4, rows_per_program=3)


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(2, 70), items=st.integers(1, 3), per_item=st.integers(1, 9),
       rows=st.sampled_from([1, 2, 4]), bf16=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_cfg_argmax_property(vocab: int, items: int, per_item: int, rows: int, bf16: bool, seed: int,
                             data: st.DataObject) -> None:
    mask_id = data.draw(st.integers(0, vocab - 1), label="mask_id")
    guidance = data.draw(st.lists(st.sampled_from([0.0, 0.5, 2.0, 3.0]), min_size=items, max_size=items),
                         label="guidance")
    g = gen(seed)
    dtype = torch.bfloat16 if bf16 else torch.float32
    c, u = logits(g, (items, per_item, vocab), dtype), logits(g, (items, per_item, vocab), dtype)
    check(c, u, torch.tensor(guidance, device=DEVICE), mask_id, "rows", rows, 1)


# Builds the tiled kernel for sm_90 (the H200) with the Triton wheel's own ptxas, no GPU needed: the compiled
# path (the ex2.ftz inline PTX, which the interpreter never runs) must build, and the default config must keep
# its design: no register spills, no barrier (each row stays inside one warp), the .ftz exp only.
def _rows_build(dtype: str, last: int, mask_is_last: bool, rows: int, warps: int) -> dict[str, Any]:
    arg_names = importlib.import_module("realtime_tts.gpu_worker.kernels.scoring")._cfg_argmax_rows_kernel.arg_names
    ptr = {"c_ptr": dtype, "u_ptr": dtype, "g_ptr": "*fp32", "pred_ptr": "*i64", "conf_ptr": "*fp32"}
    main = triton.next_power_of_2(last)
    return {"kernel": "realtime_tts.gpu_worker.kernels.scoring:_cfg_argmax_rows_kernel",
            "signature": {n: "constexpr" if n.isupper() else ptr.get(n, "i32") for n in arg_names},
            "constexprs": {"LAST": last, "MAIN": main, "LANES": min(main, 32), "ROWS": rows,
                           "MASK_IS_LAST": mask_is_last, "FTZ": True},
            "options": {"num_warps": warps}, "divisible": [n for n in arg_names if n.endswith("_ptr")]}


@pytest.mark.slow
def test_rows_kernel_compiles_for_sm90_without_spills_or_barriers() -> None:
    # the default config at V = 1025 (bf16 and fp32 logits), and a general vocab with MASK inside the tile
    configs = [("*bf16", 1024, True, 1, 1), ("*fp32", 1024, True, 1, 1), ("*fp32", 36, False, 2, 1)]
    built = sm90.build([_rows_build(*c) for c in configs])
    for config, u in zip(configs, built, strict=True):
        ptx = u["ptx"]
        assert u["stack"] == 0, f"{config} spills registers"
        assert ptx.count("bar.sync") + ptx.count("barrier.sync") == 0, f"{config} reduces across warps"
        assert ptx.count("ex2.approx.ftz.f32") > 0 and ptx.count("ex2.approx.f32") == 0, config
    # V = 1025 in 1024 lanes + 1 column: 3 exps per lane element and per peeled column, 32 lanes per thread
    assert built[0]["ptx"].count("ex2.approx.ftz.f32") == 3 * (1024 // 32 + 1)
