"""StepRunner: padded graph buckets, the fused Triton backbone and CUDA graphs against the model's own step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from realtime_tts.gpu_worker.runner import FusedBackbone, StepRunner
from realtime_tts.model import DecodeParams, OmniVoiceModel, decoding, prepare

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
TEXTS = ["Hello there, how are you today?", "A short one.", "The quick brown fox jumps over the lazy dog twice."]


@pytest.fixture(scope="module")
def model_fp32(tiny_checkpoint: Path) -> OmniVoiceModel:
    return OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cpu", load_codec=False)


def _items(model: OmniVoiceModel, num_step: int = 8) -> list[decoding.PreparedItem]:
    from realtime_tts.model import DecodeParams

    params = DecodeParams(num_step=num_step)
    return [prepare(model, t, language="en", instruct="female, low pitch" if i == 1 else None,
                    duration_s=1.0 + 0.6 * i, params=params, seed=10 + i) for i, t in enumerate(TEXTS)]


def test_slot_packed_batch_equals_host_packed_batch(model_fp32: OmniVoiceModel) -> None:
    """Items copied into device slots and packed from a padded slot list (empty rows, spare tokens and frames,
    as a graph bucket has) give decoding.pack's batch, and one step from the slots is the model's step."""
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, max_slots=8)
    items = _items(model_fp32)
    states = [decoding.ItemState.start(it) for it in items]
    for _ in range(3):  # a few steps so that tokens are partly revealed
        decoding.step(model_fp32, states)
    ref = decoding.pack(states, "cpu")
    slots_of = [runner.table.assign(s.item, s.tokens, s.step) for s in reversed(states)][::-1]  # not 0, 1, 2
    assert slots_of != [0, 1, 2]
    empty = runner.table.empty
    slots = torch.tensor(slots_of + [empty] * 3)  # a 6-wide bucket
    num_tokens, frames = ref.num_tokens + 200, ref.tokens.shape[2] + 32
    layout = runner.table.layout(slots, num_tokens, frames)
    got = runner.table.pack(layout, ref.max_seqlen)
    n, num_b, t_max = ref.num_tokens, len(states), ref.tokens.shape[2]
    assert torch.equal(got.ids[:, :n], ref.ids) and (got.ids[:, n:] == 0).all()
    assert torch.equal(got.audio_mask[:n], ref.audio_mask) and not got.audio_mask[n:].any()
    assert torch.equal(got.positions[:n], ref.positions)
    # the empty rows are zero-length: cond rows of the padding come between the real cond and uncond rows
    cu = got.cu_seqlens.tolist()
    assert cu[:num_b + 1] == ref.cu_seqlens.tolist()[:num_b + 1] and cu[num_b:6 + 1] == [cu[num_b]] * (6 - num_b + 1)
    assert cu[-1] == n
    for field in ("tokens", "cond_index", "uncond_index", "valid"):
        a, b = getattr(got, field), getattr(ref, field)
        assert torch.equal(a[:num_b, ..., :t_max], torch.where(ref.valid[:, None, :] if field == "tokens" else
                                                               ref.valid, b, a[:num_b, ..., :t_max])), field
    assert not got.valid[:, t_max:].any() and not got.valid[num_b:].any()
    for field in ("step", "seed", "guidance", "layer_penalty", "position_temperature", "class_temperature",
                  "num_frames"):
        assert torch.equal(getattr(got, field)[:num_b], getattr(ref, field).to(getattr(got, field).dtype)), field
    assert torch.equal(got.reveal[:num_b, :ref.reveal.shape[1]], ref.reveal)
    # one step from the slots (padded) == the model's step on the host-packed batch
    runner._advance(layout, ref.max_seqlen)
    decoding.step_packed(model_fp32, ref)
    for b, s in enumerate(slots_of):
        t = items[b].num_frames
        assert torch.equal(runner.table.tokens(s, t), ref.tokens[b, :, :t])
        assert int(runner.table.step[s]) == int(ref.step[b])
    assert (ref.tokens != model_fp32.mask_id).sum() > (decoding.pack(states, "cpu").tokens != model_fp32.mask_id).sum()


def test_cancelled_slots_are_reused_without_disturbing_others(model_fp32: OmniVoiceModel) -> None:
    """A state released mid-way frees its slot; a new item takes it and every item still decodes exactly as
    decoding.run decodes it alone."""
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, max_slots=2)
    items = _items(model_fp32, num_step=4)
    a, b = decoding.ItemState.start(items[0]), decoding.ItemState.start(items[1])
    runner.step([a, b])
    runner.release(b)
    assert b.slot is None and runner.table.num_free == 1
    c = decoding.ItemState.start(items[2])
    while not (a.done and c.done):
        runner.step([a, c])
    assert runner.table.num_free == 2
    assert torch.equal(a.tokens, decoding.run(model_fp32, [items[0]])[0])
    assert torch.equal(c.tokens, decoding.run(model_fp32, [items[2]])[0])
    with pytest.raises(RuntimeError, match="no free decoding slot"):
        states = [decoding.ItemState.start(it) for it in items]
        runner.step(states)


@needs_triton
@pytest.mark.parametrize(("attention", "heads", "gemms"),
                         [("fused", 1, ""), ("split", 1, ""), ("split", None, ""), ("q_fused", None, ""),
                          ("q_fused", None, "swiglu")])
def test_fused_backbone_matches_model_backbone(tiny_checkpoint: Path, model_fp32: OmniVoiceModel,
                                               attention: str, heads: int | None, gemms: str) -> None:
    if torch.cuda.is_available():  # compiled kernels need CUDA tensors
        model_fp32 = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda",
                                                    load_codec=False)
    fused = FusedBackbone(model_fp32, attention=attention, block=(16, 16, 4, 2), heads=heads,
                          # 33: this forward's token count (34: one more, so that path stays off)
                          swiglu_gemm_min_tokens=33 if "swiglu" in gemms else 34)
    # Few tokens: Triton's interpreter runs every program in Python (~10 ms each) on CPU.
    lens = [7, 12, 5, 9]
    cu = torch.tensor([0, 7, 19, 24, 33], dtype=torch.int32)
    positions = torch.cat([torch.arange(n) for n in lens])
    embeds = torch.randn(33, model_fp32.llm.cfg["hidden_size"], generator=torch.Generator().manual_seed(0))
    dev = model_fp32.device
    embeds, positions, cu = embeds.to(dev), positions.to(dev), cu.to(dev)
    with torch.inference_mode():
        ref = model_fp32.llm(embeds, positions, cu, max(lens), model_fp32.attention)
        out = fused(embeds, positions, cu, max(lens))
    ids = torch.randint(0, 1025, (8, 33), generator=torch.Generator().manual_seed(1)).to(dev)
    audio_mask = (torch.arange(33) % 3 != 0).to(dev)
    ids[:, ~audio_mask] = ids[0, ~audio_mask]
    assert torch.allclose(fused.embed(ids, audio_mask), model_fp32.embed(ids, audio_mask).float(), atol=1e-6)
    err = float((out - ref).norm() / ref.norm())
    assert err < (2e-3 if dev.type == "cuda" else 1e-4), err  # CUDA: tf32 dots in the attention kernel


@needs_triton  # the reference half lives beside its kernel
def test_unmask_matches_model_scoring(model_fp32: OmniVoiceModel) -> None:
    """argmax/confidence (kernel half, here its torch reference) + unmask == decoding.score, token for token."""
    from realtime_tts.gpu_worker.kernels import cfg_argmax_ref
    from realtime_tts.model.decoding import unmask

    states = [decoding.ItemState.start(it) for it in _items(model_fp32)]
    for _ in range(2):
        decoding.step(model_fp32, states)
    batch = decoding.pack(states, "cpu")
    g = torch.Generator().manual_seed(3)
    num_b, _, t_max = batch.tokens.shape
    c = 4 * torch.randn(num_b, 8, t_max, 1025, generator=g)
    u = 4 * torch.randn(num_b, 8, t_max, 1025, generator=g)
    _, pos_noise = decoding.item_noise(batch, 1025)
    ref = decoding.score(c, u, batch, model_fp32.mask_id, None, pos_noise)
    pred, conf = cfg_argmax_ref(c, u, batch.guidance, model_fp32.mask_id)
    ours = unmask(pred, conf, batch, model_fp32.mask_id, pos_noise)
    assert torch.equal(ours, ref)
    assert (ref != batch.tokens).any()


@needs_triton
def test_fused_scoring_step_matches_model_step(model_fp32: OmniVoiceModel) -> None:
    if torch.cuda.is_available():
        pytest.skip("covered on CUDA by test_graph_replay_equals_eager_on_gpu")
    from realtime_tts.model import DecodeParams

    # Short items: the scoring kernel runs one interpreted program per (item, frame, codebook).
    items = [prepare(model_fp32, t, language="en", duration_s=0.4, params=DecodeParams(num_step=4), seed=i)
             for i, t in enumerate(TEXTS[:2])]
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, fused_scoring=True)
    states = [decoding.ItemState.start(it) for it in items]
    ref_states = [decoding.ItemState.start(it) for it in items]
    for _ in range(2):
        runner.step(states)
        decoding.step(model_fp32, ref_states)
    for a, b in zip(states, ref_states, strict=True):
        assert torch.equal(runner.grid(a), b.tokens) and a.step == b.step


def test_startup_keys_cover_small_batches_first(model_fp32: OmniVoiceModel) -> None:
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False)
    keys = runner.startup_keys(max_tokens=16384)
    assert keys and keys[0].batch == 1
    assert [k.batch for k in keys] == sorted(k.batch for k in keys)
    assert all(k.num_tokens <= 16384 and k.num_tokens in runner.token_buckets for k in keys)
    assert len(set(keys)) == len(keys)
    # a real single 6 s design utterance lands in a pre-captured bucket
    item = prepare(model_fp32, TEXTS[0], language="en", instruct="female, low pitch", duration_s=6.0)
    assert runner.bucket_key([decoding.ItemState.start(item)]) in keys
    assert runner.capture_startup(max_tokens=16384) == 0, "no graphs without CUDA"


def test_runner_steps_match_model_steps_with_counters(model_fp32: OmniVoiceModel) -> None:
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False)
    items = _items(model_fp32, num_step=4)
    codes = runner.run(items)
    ref = decoding.run(model_fp32, items)
    assert all(torch.equal(a, b) for a, b in zip(codes, ref, strict=True))
    assert runner.stats.steps == 4 and runner.stats.graph_misses == 4 and runner.stats.graph_hits == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graph_replay_equals_eager_on_gpu(tiny_checkpoint: Path) -> None:
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda", load_codec=False)
    items = _items(model, num_step=8)
    eager = StepRunner(model, use_fused=False, use_graphs=False).run(items)
    fused_eager = StepRunner(model, use_fused=True, use_graphs=False).run(items)
    graphed = StepRunner(model, use_fused=True, use_graphs=True)
    # fused scoring alone (model backbone, fp32 head as the model's) is the model's step token for token
    plain_fused_scoring = StepRunner(model, use_fused=False, use_graphs=False, fused_scoring=True,
                                     head_tf32=False).run(items)
    assert all(torch.equal(a, b) for a, b in zip(eager, plain_fused_scoring, strict=True))
    stepped = graphed.run(items)
    chained = graphed.run_graphed(items)
    assert graphed.stats.graph_hits >= 8 and graphed.stats.graphs_captured == 1
    assert chained is not None
    for a, b, c, d in zip(eager, fused_eager, stepped, chained, strict=True):
        # fp32 with tf32 dots in the fused path: tokens agree almost everywhere
        assert (a == b).float().mean() > 0.95
        assert torch.equal(b, c) and torch.equal(c, d)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphed_steps_when_the_batch_changes_on_gpu(tiny_checkpoint: Path) -> None:
    """Items finishing at different steps: the fast replay path, then re-packs into smaller buckets."""
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda", load_codec=False)
    items = _items(model, num_step=8)[:2] + _items(model, num_step=4)[2:]
    fused_eager = StepRunner(model, use_fused=True, use_graphs=False).run(items)
    graphed = StepRunner(model, use_fused=True, use_graphs=True)
    stepped = graphed.run(items)
    assert graphed.stats.graph_hits == 8 and graphed.stats.graphs_captured >= 1
    for a, b in zip(fused_eager, stepped, strict=True):
        assert torch.equal(a.cpu(), b.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_capture_startup_then_requests_hit_without_capturing(tiny_checkpoint: Path) -> None:
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda", load_codec=False)
    runner = StepRunner(model)
    item = prepare(model, TEXTS[0], language="en", instruct="female, low pitch", duration_s=6.0,
                   params=DecodeParams(num_step=4))
    assert runner.capture_startup(max_tokens=2048, max_seconds=60.0) > 0
    captured = runner.stats.graphs_captured
    runner.run([item])
    assert runner.stats.graphs_captured == captured and runner.stats.graph_hits == 4


def test_serving_keys_cover_mixed_continuous_batches(model_fp32: OmniVoiceModel) -> None:
    """The worker captures serving_keys() at start-up: batches that mix sentence lengths (as continuous
    batching makes them) of any size up to the step budget land in one of them, small batches first."""
    import random

    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False)
    budget = 16384
    keys = set(runner.serving_keys(budget))
    ordered = runner.serving_keys(budget)
    assert [k.batch for k in ordered] == sorted(k.batch for k in ordered) and len(keys) == len(ordered)
    assert all(k.num_tokens <= budget for k in keys)
    rng = random.Random(0)
    params = DecodeParams(num_step=4)
    pool = [prepare(model_fp32, t, language="en", duration_s=d, params=params)
            for t in TEXTS for d in (1.8, 2.8, 3.8, 5.0, 6.0, 6.6, 8.0, 10.0)]
    for size in (1, 2, 3, 5, 8, 13, 20, 33, 47, 64, 90, 128):
        states = [decoding.ItemState.start(rng.choice(pool)) for _ in range(size)]
        num_tokens = sum(s.item.num_tokens for s in states)
        if num_tokens > budget:
            continue  # the scheduler never packs a step this large
        key = runner.bucket_key(states)
        assert key in keys, (size, num_tokens, key)


def _staggered(runner: StepRunner, items: list[decoding.PreparedItem]) -> list[torch.Tensor]:
    """Continuous batching as the worker does it: item 1 joins at step 2, item 0 is cancelled at step 3 and
    item 2 takes its place; → the final grids of items 1 and 2 (on the CPU)."""
    a, b, c = (decoding.ItemState.start(it) for it in items)
    for k in range(20):
        live = [s for s in ((a if k < 3 else None), (b if k >= 2 else None), (c if k >= 3 else None))
                if s is not None and not s.done]
        if k == 3:
            runner.release(a)
        if not live:
            break
        runner.step(live)
    return [b.tokens.cpu(), c.tokens.cpu()]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphs_follow_joins_and_cancels_on_gpu(tiny_checkpoint: Path) -> None:
    """Graphed steps over slots == eager steps over the same slots when items join mid-way and one is cancelled
    (its slot reused at once), and == each item decoded alone (batch invariance)."""
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cuda", load_codec=False)
    items = _items(model, num_step=6)
    eager = _staggered(StepRunner(model, use_fused=True, use_graphs=False, max_slots=2), items)
    graphed_runner = StepRunner(model, use_fused=True, use_graphs=True, max_slots=2)
    graphed = _staggered(graphed_runner, items)
    assert graphed_runner.stats.graph_hits > 0 and graphed_runner.stats.graph_misses == 0
    alone = [StepRunner(model, use_fused=True, use_graphs=True).run([it])[0] for it in items[1:]]
    for e, g, solo in zip(eager, graphed, alone, strict=True):
        assert torch.equal(e, g) and torch.equal(g, solo)


def test_a_reused_slot_gets_a_fresh_layout(model_fp32: OmniVoiceModel) -> None:
    """A graph's cached layout follows the items, not the slot numbers: after a cancel, a longer item that
    takes the freed slot is laid out at its own length (a stale layout left its extra frames masked forever)."""
    from realtime_tts.gpu_worker.runner import BucketKey, _Graph

    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, max_slots=4)
    items = _items(model_fp32)
    short, long_ = sorted(items[:2], key=lambda it: it.num_frames)
    key = BucketKey(1024, 1, 64)
    empty = torch.full((1,), runner.table.empty, dtype=torch.long)
    layout = runner.table.layout(empty, key.num_tokens, key.frames)
    graph = _Graph(graph=None, layout=layout)
    a = decoding.ItemState.start(short)
    runner._admit([a])
    runner._load(graph, [a], key)
    assert int(layout.num_frames[0]) == short.num_frames
    slot = a.slot
    runner.release(a)
    b = decoding.ItemState.start(long_)
    runner._admit([b])
    assert b.slot == slot  # the freed slot, reused at once
    runner._load(graph, [b], key)
    assert int(layout.num_frames[0]) == long_.num_frames > short.num_frames
    assert int(layout.valid[0].sum()) == long_.num_frames


def test_a_grid_with_unrevealed_positions_is_refused_before_the_codec(tiny_checkpoint: Path) -> None:
    model = OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cpu")
    runner = StepRunner(model, use_fused=False, use_graphs=False, max_slots=2)
    grid = torch.zeros(8, 10, dtype=torch.long)
    assert len(runner.decode([grid])) == 1
    grid[3, 4] = model.mask_id
    with pytest.raises(RuntimeError, match="mask id"):
        runner.decode([grid, torch.zeros(8, 10, dtype=torch.long)])


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_bucketed_steps_with_random_joins_and_cancels_equal_each_item_alone(model_fp32: OmniVoiceModel,
                                                                            seed: int) -> None:
    """The graph path's bookkeeping on the CPU (bucketed: padded bucket shapes, layouts cached per bucket and
    rebuilt when its items change): items joining at random steps, random cancels whose slots are reused at once
    by items of other lengths; every finished item's codes equal the item decoded alone."""
    import random

    rng = random.Random(seed)
    texts = TEXTS + ["Yes."]
    items = [prepare(model_fp32, rng.choice(texts), language="en", duration_s=rng.choice([0.4, 0.8, 1.2]),
                     params=DecodeParams(num_step=rng.choice([3, 5])), seed=i) for i in range(12)]
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, bucketed=True, max_slots=4,
                        token_buckets=(128, 256, 512, 1024), batch_buckets=(1, 2, 4))
    pending, live = list(range(len(items))), []
    states: dict[int, decoding.ItemState] = {}
    finished: dict[int, torch.Tensor] = {}
    cancelled = 0
    while pending or live:
        while pending and len(live) < 4 and rng.random() < 0.6:
            i = pending.pop(0)
            states[i] = decoding.ItemState.start(items[i])
            live.append(i)
        if live and rng.random() < 0.25:
            i = rng.choice(live)
            runner.release(states[i])
            live.remove(i)
            cancelled += 1
        if live:
            runner.step([states[i] for i in live])
            for i in [i for i in live if states[i].done]:
                finished[i] = states[i].tokens
                live.remove(i)
    assert cancelled and finished and runner.table._serials > 4  # slots were reused
    assert runner.stats.graph_misses > 0 and len(runner._buckets) > 1
    for i, codes in finished.items():
        assert torch.equal(codes, decoding.run(model_fp32, [items[i]])[0]), i


def test_the_longest_segment_steps_in_a_bucket(model_fp32: OmniVoiceModel) -> None:
    """A segment of the longest length prepare() allows (60 s) fits its frame bucket and its slot, padded with a
    short one as a graph bucket pads it (a 1504-frame slot under a 1536-frame bucket failed the whole batch)."""
    from realtime_tts.model.sequence import MAX_FRAMES

    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, bucketed=True, max_slots=2)
    params = DecodeParams(num_step=2)
    long_ = prepare(model_fp32, TEXTS[2], language="en", duration_s=MAX_FRAMES / 25 - 0.5, params=params, seed=1)
    short = prepare(model_fp32, TEXTS[1], language="en", duration_s=1.0, params=params, seed=2)
    states = [decoding.ItemState.start(long_), decoding.ItemState.start(short)]
    key = runner.bucket_key(states)
    assert not isinstance(key, str) and key.frames >= long_.num_frames and key.frames <= runner.table.max_frames
    while not all(s.done for s in states):
        runner.step(states)
    assert (states[0].tokens != model_fp32.mask_id).all() and states[0].tokens.shape[1] == long_.num_frames


def test_a_failed_assign_keeps_its_slot_free(model_fp32: OmniVoiceModel) -> None:
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, max_slots=2)
    item = _items(model_fp32)[0]
    with pytest.raises(RuntimeError):
        runner.table.assign(item, torch.zeros(8, 1, dtype=torch.long))  # a grid too short for the item
    assert runner.table.num_free == 2


def test_bulk_steps_pad_frames_to_a_finer_quantum(model_fp32: OmniVoiceModel) -> None:
    """A step above the serving ladder (bulk) pads its target grids to BULK_FRAME_QUANTUM frames, a serving step
    to slots.FRAME_QUANTUM; the bulk batch, stepped in its finer bucket, decodes each item as it decodes alone."""
    from realtime_tts.gpu_worker.runner import BULK_FRAME_QUANTUM, SERVING_MAX_TOKENS
    from realtime_tts.gpu_worker.slots import FRAME_QUANTUM

    params = DecodeParams(num_step=2)
    items = [prepare(model_fp32, TEXTS[i % len(TEXTS)], language="en", duration_s=6.0, params=params, seed=i)
             for i in range(64)]
    frames = items[0].num_frames  # 150 for 6 s at 25 frames per second
    assert frames % FRAME_QUANTUM and frames % BULK_FRAME_QUANTUM, "the length must need padding under both"
    runner = StepRunner(model_fp32, use_fused=False, use_graphs=False, bucketed=True, max_slots=64)
    states = [decoding.ItemState.start(it) for it in items]
    bulk, serving = runner.bucket_key(states), runner.bucket_key(states[:1])
    assert not isinstance(bulk, str) and not isinstance(serving, str)
    assert bulk.num_tokens > SERVING_MAX_TOKENS >= serving.num_tokens
    assert bulk.frames == -(-frames // BULK_FRAME_QUANTUM) * BULK_FRAME_QUANTUM < serving.frames
    assert serving.frames == -(-frames // FRAME_QUANTUM) * FRAME_QUANTUM
    while not all(s.done for s in states):
        runner.step(states)
    for i in (0, 1, 63):
        assert torch.equal(states[i].tokens, decoding.run(model_fp32, [items[i]])[0]), i
