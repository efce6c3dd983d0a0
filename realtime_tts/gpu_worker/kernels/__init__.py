"""Triton kernels for the OmniVoice forward (GPU workers only), each beside its plain-torch reference.

Imports torch and triton; never imported by the web process. On a machine without CUDA the kernels run only
under Triton's interpreter (TRITON_INTERPRET=1 set before this package is imported) — tests do that.
"""

from realtime_tts.gpu_worker.kernels.attention import (
    ATTENTION_MODES,
    attention_tiles,
    max_attention_tiles,
    norm_rope_attention,
    varlen_attention,
    varlen_attention_gqa,
    varlen_attention_ref,
    varlen_attention_rope,
)
from realtime_tts.gpu_worker.kernels.dac_decoder import conv_epilogue, conv_epilogue_ref, use_fused_codec
from realtime_tts.gpu_worker.kernels.embed import embed, embed_ref
from realtime_tts.gpu_worker.kernels.fp8 import (
    fp8_linear,
    fp8_linear_ref,
    quantize_rows,
    quantize_rows_ref,
    quantize_weight,
)
from realtime_tts.gpu_worker.kernels.gemm import (
    GEMM_CONFIG,
    SWIGLU_CONFIG,
    GemmConfig,
    gemm,
    interleave_gate_up,
    swiglu_gemm,
    swiglu_gemm_ref,
)
from realtime_tts.gpu_worker.kernels.norm import add_rms_norm, add_rms_norm_ref, rms_norm, rms_norm_ref
from realtime_tts.gpu_worker.kernels.rope import head_norm_rope, qk_norm_rope, qk_norm_rope_ref, rope_cos_sin
from realtime_tts.gpu_worker.kernels.scoring import cfg_argmax, cfg_argmax_ref
from realtime_tts.gpu_worker.kernels.snake import snake, snake_ref, use_fused_snake
from realtime_tts.gpu_worker.kernels.swiglu import silu_mul, silu_mul_ref

__all__ = [
    "ATTENTION_MODES",
    "GEMM_CONFIG",
    "SWIGLU_CONFIG",
    "GemmConfig",
    "add_rms_norm",
    "add_rms_norm_ref",
    "attention_tiles",
    "cfg_argmax",
    "cfg_argmax_ref",
    "conv_epilogue",
    "conv_epilogue_ref",
    "embed",
    "embed_ref",
    "fp8_linear",
    "fp8_linear_ref",
    "gemm",
    "head_norm_rope",
    "interleave_gate_up",
    "max_attention_tiles",
    "norm_rope_attention",
    "qk_norm_rope",
    "qk_norm_rope_ref",
    "quantize_rows",
    "quantize_rows_ref",
    "quantize_weight",
    "rms_norm",
    "rms_norm_ref",
    "rope_cos_sin",
    "silu_mul",
    "silu_mul_ref",
    "snake",
    "snake_ref",
    "swiglu_gemm",
    "swiglu_gemm_ref",
    "use_fused_codec",
    "use_fused_snake",
    "varlen_attention",
    "varlen_attention_gqa",
    "varlen_attention_ref",
    "varlen_attention_rope",
]
