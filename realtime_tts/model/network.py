"""OmniVoiceModel: loads the released checkpoint layout (weights, text tokenizer, codec) and runs the
packed forward (audio/text embedding → bidirectional Qwen3 → 8-codebook audio head). Torch only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from realtime_tts.model.attention import AttentionFn, default_attention
from realtime_tts.model.backbone import Backbone

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class OmniVoiceModel(nn.Module):
    """The network plus what it needs to read text and write audio. Build with from_pretrained."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        llm = config["llm_config"]
        self.num_codebooks: int = config["num_audio_codebook"]
        self.audio_vocab: int = config["audio_vocab_size"]
        self.mask_id: int = config["audio_mask_id"]
        self.llm = Backbone(llm)
        self.audio_embeddings = nn.Embedding(self.num_codebooks * self.audio_vocab, llm["hidden_size"])
        self.audio_heads = nn.Linear(llm["hidden_size"], self.num_codebooks * self.audio_vocab, bias=False)
        self.register_buffer("codebook_layer_offsets", torch.arange(self.num_codebooks) * self.audio_vocab)
        self.attention: AttentionFn = default_attention(torch.device("cpu"))
        self.tokenizer: Any = None  # transformers tokenizer from the checkpoint dir
        self.codec: Any = None  # realtime_tts.model.codec.Codec
        self.special_ids: dict[str, int] = {}

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], dtype: torch.dtype | str = torch.bfloat16,
                        device: str | torch.device | None = None, load_codec: bool = True) -> OmniVoiceModel:
        """Load <path>/{config.json, model.safetensors, tokenizer*, audio_tokenizer/}. dtype applies to the
        transformer; the codec stays fp32 as released (it is ~1% of the compute)."""
        from transformers import AutoTokenizer

        from realtime_tts.model.checkpoint import SPECIAL_TOKENS
        from realtime_tts.model.codec import Codec

        root = Path(path)
        if isinstance(dtype, str):
            dtype = DTYPES[dtype]
        dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        config = json.loads((root / "config.json").read_text())
        with torch.device("meta"):
            model = cls(config)
        state = load_file(str(root / "model.safetensors"), device=str(dev))
        state.pop("codebook_layer_offsets", None)  # a derived constant; ours is built from the config
        missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
        missing = [m for m in missing if m != "codebook_layer_offsets"]
        if missing or unexpected:
            raise ValueError(f"{root}: checkpoint does not match the OmniVoice layout "
                             f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
        model.codebook_layer_offsets = torch.arange(model.num_codebooks, device=dev) * model.audio_vocab
        model.llm.inv_freq = _inv_freq(config["llm_config"]).to(dev)
        model.to(device=dev, dtype=dtype)
        model.codebook_layer_offsets = model.codebook_layer_offsets.long()
        model.llm.inv_freq = model.llm.inv_freq.float()
        model.eval().requires_grad_(False)
        model.attention = default_attention(dev)
        model.tokenizer = AutoTokenizer.from_pretrained(str(root))
        ids = model.tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
        model.special_ids = dict(zip(SPECIAL_TOKENS, ids, strict=True))
        if load_codec:
            model.codec = Codec.from_pretrained(root / "audio_tokenizer", device=dev)
        return model

    @property
    def device(self) -> torch.device:
        return self.audio_heads.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.audio_heads.weight.dtype

    def embed(self, ids: torch.Tensor, audio_mask: torch.Tensor) -> torch.Tensor:
        """ids [8, N] (text positions repeat the text id on all 8 rows), audio_mask [N] → fp32 [N, H].
        Audio positions sum the 8 codebook embeddings (table rows offset by c·1025)."""
        text = self.llm.embed_tokens(ids[0]).float()  # [N, H]
        offsets: torch.Tensor = self.codebook_layer_offsets  # type: ignore[assignment]
        shifted = ids * audio_mask[None, :] + offsets[:, None]  # [8, N]
        # Summed in fp32: the result starts the fp32 residual stream.
        audio = self.audio_embeddings(shifted.t()).float().sum(dim=1)  # [N, 8, H] → [N, H]
        return torch.where(audio_mask[:, None], audio, text)

    def hidden(self, ids: torch.Tensor, audio_mask: torch.Tensor, positions: torch.Tensor,
               cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        """Packed forward to the final norm: → [N, H]."""
        out: torch.Tensor = self.llm(self.embed(ids, audio_mask), positions, cu_seqlens, max_seqlen, self.attention)
        return out

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] → fp32 logits [..., 8, 1025]. The head runs in fp32 whatever the model dtype: it reads
        only target frames (~2% of the FLOPs), and bf16 logits would be rounded before CFG amplifies their
        error (c + g·(c − u) scales it by 1 + 2g) — rounding that flips near-tied token choices."""
        weight = self.__dict__.get("_head_fp32")
        if weight is None or weight.device != self.audio_heads.weight.device:
            weight = self.audio_heads.weight.float()
            self.__dict__["_head_fp32"] = weight
        logits = torch.nn.functional.linear(hidden.float(), weight)
        return logits.view(*hidden.shape[:-1], self.num_codebooks, self.audio_vocab)


    # Convenience entry points over the codec. Preparing and generating are sequence.prepare(model, ...) and
    # decoding.run(model, items): they import this module, never the other way round.

    def decode(self, codes: list[torch.Tensor]) -> list[Any]:
        """Code grids → float32 numpy waveforms at 24 kHz (960 samples per frame)."""
        waves: list[Any] = self.codec.decode(codes)
        return waves

    def encode_prompt(self, audio: Any, sample_rate: int, ref_text: str, add_punctuation: bool = True) -> Any:
        """Reference recording → codec.ClonePrompt (codes + transcript + loudness)."""
        return self.codec.encode_prompt(audio, sample_rate, ref_text, add_punctuation)


def _inv_freq(llm: dict[str, Any]) -> torch.Tensor:
    theta = float((llm.get("rope_parameters") or {}).get("rope_theta", llm.get("rope_theta", 10000.0)))
    dim = llm["head_dim"]
    inv_freq: torch.Tensor = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return inv_freq
