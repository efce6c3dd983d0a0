"""Persistent TMA matmuls for the backbone's bulk forwards: the MLP's gate/up projection with SwiGLU in its
epilogue (the [N, 2I] gate_up product never reaches memory), and a plain x @ w.T of the same make so the
bench can rank it against cuBLAS on the same shapes. Worker processes only (torch, triton).
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@dataclass(frozen=True, slots=True)
class GemmConfig:
    """Output tile of one program (block_m × block_n; the SwiGLU kernel reads 2·block_n weight rows per tile),
    the K step, warps, pipeline stages, the M-tiles walked per column band (L2 reuse of weight tiles), and
    persistent: one program per SM, each walking tiles SM-count apart (False: one program per tile)."""
    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    num_warps: int = 8
    num_stages: int = 3
    group_m: int = 8
    persistent: bool = True

    @classmethod
    def parse(cls, spec: str) -> GemmConfig:
        """"128,128,64,8,3[,group_m[,persistent 0/1]]" → GemmConfig."""
        parts = [int(x) for x in spec.split(",")]
        names = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "persistent")
        values = dict(zip(names, parts, strict=False))
        if "persistent" in values:
            values["persistent"] = bool(values["persistent"])
        return cls(**values)  # type: ignore[arg-type]

    def label(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}w{self.num_warps}s{self.num_stages}g{self.group_m}"
                + ("p" if self.persistent else ""))


# The best of the H200 sweeps at bulk sizes (bench/omnivoice_gemm.py; 42368 tokens, bf16): swiglu_gemm
# 128 x (2·128) tiles; the plain GEMM 128 x 256 (the down and o projections' N = 1024).
SWIGLU_CONFIG = GemmConfig(128, 128, 64, 8, 3, 16, True)
GEMM_CONFIG = GemmConfig(128, 256, 64, 8, 3, 8, True)


@triton.jit
def _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr):
    # Grouped order: GROUP_M consecutive M-tiles walk one band of output columns together, so each weight tile
    # is read from L2 by the group rather than from memory by every M-tile.
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_m
    pid_n = (tile % per_group) // group_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _tile(x_desc, w_desc, out_desc, tile, num_pid_m, num_pid_n, K: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SWIGLU: tl.constexpr):
    off_m, off_n = _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
    dt = out_desc.dtype
    # SWIGLU: one [BLOCK_M, 2·BLOCK_N] product per tile: the weight rows of output band j are gate rows then up
    # rows (interleave_gate_up), so a single wide dot feeds both halves
    W_ROWS: tl.constexpr = 2 * BLOCK_N if SWIGLU else BLOCK_N
    w_row = 2 * off_n if SWIGLU else off_n
    acc = tl.zeros([BLOCK_M, W_ROWS], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(x_desc.load([off_m, k]), w_desc.load([w_row, k]).T, acc)
    if SWIGLU:
        g, u = tl.split(tl.permute(tl.reshape(acc, [BLOCK_M, 2, BLOCK_N]), (0, 2, 1)))  # 2 × [BLOCK_M, BLOCK_N]
        g = g.to(dt).to(tl.float32)
        u = u.to(dt).to(tl.float32)
        act = (g / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)
        out_desc.store([off_m, off_n], (act * u).to(dt))
    else:
        out_desc.store([off_m, off_n], acc.to(dt))


@triton.jit
def _gemm_kernel(x_desc, w_desc, out_desc, M, N: tl.constexpr, K: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                 STATIC_TILES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, SWIGLU: tl.constexpr):
    """out[M, N] = x @ w.T (fp32 accumulation, rounded once to out's dtype), or with SWIGLU
    silu(x @ gate.T) * (x @ up.T) from the interleaved weight, each product rounded to out's dtype first (the
    eager layers' roundings: gate and up come out of their matmuls in the activation dtype, silu is rounded
    before the product). Tiles past M or N read zeros and are clipped on store by the descriptors.
    STATIC_TILES: the tile count as a constant, for Triton's interpreter (its loops need Python bounds); 0 on
    the GPU."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if STATIC_TILES == 0:
        for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=True):
            _tile(x_desc, w_desc, out_desc, tile, num_pid_m, num_pid_n, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                  SWIGLU)
    else:
        for first in range(0, STATIC_TILES, NUM_PROGRAMS):
            tile = first + tl.program_id(0)
            if tile < STATIC_TILES:
                _tile(x_desc, w_desc, out_desc, tile, num_pid_m, num_pid_n, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                      SWIGLU)


_SM_COUNT: dict[int, int] = {}


def _programs(num_tiles: int, device: torch.device, persistent: bool) -> int:
    """One program per SM when persistent (each walks tiles SM-count apart); off CUDA (Triton's interpreter)
    3, so that tests walk several tiles per program too."""
    if not persistent:
        return max(1, num_tiles)
    if device.type != "cuda":
        return max(1, min(num_tiles, 3))
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return max(1, min(num_tiles, _SM_COUNT[index]))


def _static_tiles(num_tiles: int) -> int:
    return num_tiles if triton.knobs.runtime.interpret else 0


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    assert x.dim() == 2 and w.dim() == 2 and x.shape[1] == w.shape[1], "x [M, K] and w [N, K]"
    assert x.stride(1) == 1 and w.stride(1) == 1 and x.dtype == w.dtype
    # TMA: row pitches and bases 16-byte aligned
    assert (x.stride(0) * x.element_size()) % 16 == 0 and (w.stride(0) * w.element_size()) % 16 == 0
    assert x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0


def _launch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, c: GemmConfig, swiglu: bool) -> None:
    """_gemm_kernel over out [M, N] (N = out's columns; with swiglu w holds 2·block_n rows per band)."""
    m, k = x.shape
    n = out.shape[1]
    x_desc = TensorDescriptor.from_tensor(x, [c.block_m, c.block_k])
    w_desc = TensorDescriptor.from_tensor(w, [2 * c.block_n if swiglu else c.block_n, c.block_k])
    out_desc = TensorDescriptor.from_tensor(out, [c.block_m, c.block_n])
    num_tiles = triton.cdiv(m, c.block_m) * triton.cdiv(n, c.block_n)
    programs = _programs(num_tiles, x.device, c.persistent)
    _gemm_kernel[(programs,)](x_desc, w_desc, out_desc, m, n, k, NUM_PROGRAMS=programs,
                              STATIC_TILES=_static_tiles(num_tiles), BLOCK_M=c.block_m, BLOCK_N=c.block_n,
                              BLOCK_K=c.block_k, GROUP_M=c.group_m, SWIGLU=swiglu, num_warps=c.num_warps,
                              num_stages=c.num_stages)


def interleave_gate_up(gate_up: torch.Tensor, block_n: int) -> torch.Tensor:
    """gate_up [2I, K] (gate rows, then up rows) → [2·I', K] for swiglu_gemm with this block_n: band j holds
    gate rows j·block_n.. then the matching up rows; I' = I rounded up to block_n (zero rows pad the last band,
    their outputs are clipped)."""
    inter, k = gate_up.shape[0] // 2, gate_up.shape[1]
    bands = -(-inter // block_n)
    out = torch.zeros(bands, 2, block_n, k, dtype=gate_up.dtype, device=gate_up.device)  # [bands, 2, BN, K]
    padded = torch.zeros(2, bands * block_n, k, dtype=gate_up.dtype, device=gate_up.device)
    padded[:, :inter] = gate_up.view(2, inter, k)
    out.copy_(padded.view(2, bands, block_n, k).transpose(0, 1))
    return out.view(bands * 2 * block_n, k)


def swiglu_gemm(x: torch.Tensor, w_tiles: torch.Tensor, inter: int, out: torch.Tensor | None = None,
                config: GemmConfig = SWIGLU_CONFIG) -> torch.Tensor:
    """x [M, K] and w_tiles = interleave_gate_up(gate_up, config.block_n) → silu(x @ gate.T) * (x @ up.T)
    [M, inter] in x's dtype, with no [M, 2I] intermediate. No host syncs (graph-capturable)."""
    _check(x, w_tiles)
    m = x.shape[0]
    c = config
    assert w_tiles.shape[0] == 2 * c.block_n * triton.cdiv(inter, c.block_n), "w_tiles: interleave_gate_up " \
        "with this config's block_n"
    out = torch.empty(m, inter, dtype=x.dtype, device=x.device) if out is None else out
    if m == 0:
        return out
    _launch(x, w_tiles, out, c, swiglu=True)
    return out


def gemm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None,
         config: GemmConfig = GEMM_CONFIG) -> torch.Tensor:
    """x [M, K] @ w [N, K].T → [M, N] in x's dtype: the Triton twin of torch.matmul(x, w.t()) that
    bench/omnivoice_gemm.py ranks against cuBLAS (how fast this kernel's make is at plain GEMMs)."""
    _check(x, w)
    m, n = x.shape[0], w.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device) if out is None else out
    if m == 0:
        return out
    _launch(x, w, out, config, swiglu=False)
    return out


def swiglu_gemm_ref(x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
    """The eager MLP's first half: two matmuls' outputs in x's dtype, silu(gate) * up."""
    inter = gate_up.shape[0] // 2
    gate = torch.matmul(x, gate_up[:inter].t())
    up = torch.matmul(x, gate_up[inter:].t())
    return torch.nn.functional.silu(gate) * up
