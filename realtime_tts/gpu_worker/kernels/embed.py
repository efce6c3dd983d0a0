"""OmniVoice input embedding in one pass: text positions read the text table, audio positions sum their 8
codebook rows (table rows offset by c·audio_vocab) in fp32, in codebook order; the sum is rounded once to the
output dtype (fp32: our fp32 residual stream; bf16: what the reference's bf16 `embedding(...).sum(dim=1)`
gives, since torch sums bf16 in fp32 and rounds once)."""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _embed_kernel(ids_ptr, mask_ptr, text_ptr, audio_ptr, out_ptr, stride_ids, stride_text, stride_audio,
                  stride_out, hidden, audio_vocab, NUM_CB: tl.constexpr, BLOCK: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cmask = cols < hidden
    is_audio = tl.load(mask_ptr + tok).to(tl.int1)
    if is_audio:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for c in tl.static_range(NUM_CB):
            row = tl.load(ids_ptr + c * stride_ids + tok) + c * audio_vocab
            acc += tl.load(audio_ptr + row * stride_audio + cols, mask=cmask, other=0.0).to(tl.float32)
    else:
        row = tl.load(ids_ptr + tok)
        acc = tl.load(text_ptr + row * stride_text + cols, mask=cmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + tok * stride_out + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


def embed(ids: torch.Tensor, audio_mask: torch.Tensor, text_table: torch.Tensor, audio_table: torch.Tensor,
          audio_vocab: int, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ids [8, N] long (text positions repeat the text id), audio_mask [N] bool → [N, H] in out_dtype."""
    num_cb, num_tokens = ids.shape
    hidden = text_table.shape[1]
    out = torch.empty(num_tokens, hidden, dtype=out_dtype, device=ids.device)
    if num_tokens:
        _embed_kernel[(num_tokens,)](
            ids, audio_mask, text_table, audio_table, out, ids.stride(0), text_table.stride(0),
            audio_table.stride(0), out.stride(0), hidden, audio_vocab, NUM_CB=num_cb,
            BLOCK=triton.next_power_of_2(hidden), num_warps=4)
    return out


def embed_ref(ids: torch.Tensor, audio_mask: torch.Tensor, text_table: torch.Tensor, audio_table: torch.Tensor,
              audio_vocab: int, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    offsets = torch.arange(ids.shape[0], device=ids.device)[:, None] * audio_vocab
    audio = audio_table[(ids * audio_mask[None, :] + offsets).t()].float().sum(dim=1)  # [N, H]
    return torch.where(audio_mask[:, None], audio, text_table[ids[0]].float()).to(out_dtype)
