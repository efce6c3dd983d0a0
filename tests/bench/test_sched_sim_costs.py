"""The scheduler simulation's cost file (bench/omnivoice_costs.py): the shipped file loads, a bad one fails with
an error naming the field, a cost file is made from a serving run's JSON, the worker's real log lines parse, and
the sim runs on measured costs (admission control included)."""

from __future__ import annotations

import copy
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# appended, not prepended: bench/plugins.py (the plugins benchmark) must not shadow tests/plugins, the package
# tests/test_plugins.py imports (prepended, it broke that module's collection in the whole-suite run)
sys.path.append(str(REPO / "bench"))

from omnivoice_costs import (  # bench/ is put on the path above
    CostFileError,
    load_costs,
    make_costs,
    parse_activity,
    parse_costs,
    parse_step_times,
    run_activity,
)

RESULTS = REPO / "bench" / "results"


def shipped() -> dict[str, Any]:
    return json.loads((RESULTS / "h200_costs.json").read_text())


def test_the_shipped_cost_file_loads_with_its_provenance() -> None:
    model = load_costs(RESULTS / "h200_costs.json")
    assert model.provenance["command"].startswith("python") and model.provenance["commit"]
    assert model.step.ms(1000) == model.step.ms(1024) < model.step.ms(1025)  # a step costs its bucket
    assert model.codec.ms([50]) > 0 and model.codec.ms([50, 60]) > model.codec.ms([50])


def _without(doc: dict[str, Any], path: str) -> dict[str, Any]:
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    del node[last]
    return doc


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value
    return doc


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: _without(d, "codec.item_ms"), "codec.item_ms"),
    (lambda d: _without(d, "provenance.commit"), "provenance.commit"),
    (lambda d: _without(d, "step"), "step.bucket_ms"),
    (lambda d: _set(d, "loop.gap_ms", "fast"), "loop.gap_ms"),
    (lambda d: _set(d, "loop.host_ms_per_item", -1.0), "loop.host_ms_per_item"),
    (lambda d: _set(d, "codec.frames", "batched"), "codec.frames"),
    (lambda d: _set(d, "step.bucket_ms", [[512, 2.0], [256, 1.0]]), "step.bucket_ms"),
    (lambda d: _set(d, "step.bucket_ms", [[256, 1.0], [512, 0]]), "step.bucket_ms[1]"),
    (lambda d: _set(d, "interference.contention", True), "interference.contention"),
    (lambda d: _set(d, "version", 2), "version"),
])
def test_a_bad_cost_file_names_the_field(tmp_path: Path, change: Any, field: str) -> None:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(change(copy.deepcopy(shipped()))))
    with pytest.raises(CostFileError) as err:
        load_costs(path)
    assert f"'{field}'" in str(err.value) and str(path) in str(err.value)


def test_a_file_that_is_not_json_or_not_there_says_so(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{ not json")
    with pytest.raises(CostFileError, match="not JSON"):
        load_costs(tmp_path / "bad.json")
    with pytest.raises(CostFileError, match="cannot read"):
        load_costs(tmp_path / "missing.json")
    with pytest.raises(CostFileError, match="expected a JSON object"):
        parse_costs([1, 2])


def test_a_cost_file_is_made_from_a_serving_run_and_steploop_rows() -> None:
    serve = json.loads((RESULTS / "omnivoice_serve_h200.json").read_text())
    # first without the run's start-up step times (the session-8 run saved them; session 7's did not)
    serve["step_points_ms"] = None
    rows = [json.loads(line) for line in (RESULTS / "omnivoice_steploop_h200.jsonl").read_text().splitlines()]
    doc = make_costs(serve, rows, "test")
    model = parse_costs(doc)
    segments = sum(r["server"]["segments"] for r in serve["agents"] + serve["loads"])
    codec_s = sum(r["server"]["codec_s"] for r in serve["agents"] + serve["loads"])
    assert model.codec.item_ms == pytest.approx(1000 * codec_s / segments, abs=1e-3)
    # no start-up step times: the staircase is the base one rescaled to the step loop's
    # GPU time per step, which at 64 items (6895 tokens, bucket 7168) measured 13.94 ms
    assert model.step.ms(7168) == pytest.approx(13.94, abs=0.02)
    # with the worker's start-up points in the run, those are the staircase
    serve["step_points_ms"] = [[256, 1.5], [512, 1.9], [1024, 2.6]]
    assert parse_costs(make_costs(serve, rows, "test")).step.bucket_ms == ((256, 1.5), (512, 1.9), (1024, 2.6))
    with pytest.raises(CostFileError, match="no step times"):
        make_costs({**serve, "step_points_ms": None}, [], "test")


def _worker_log_line(message: str) -> str:
    """A message as the worker process logs it (gpu_worker/loop.main's format)."""
    fmt = logging.Formatter("%(asctime)s worker0 %(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("realtime_tts.worker", logging.INFO, __file__, 1, message, None, None)
    return fmt.format(record)


def test_the_workers_own_log_lines_parse() -> None:
    from realtime_tts.gpu_worker.backend import DeviceTimes
    from realtime_tts.gpu_worker.loop import _Activity

    act = _Activity(since=100.0, steps=400, items=400 * 48, tokens=400 * 5400, step_s=400 * 0.012,
                    host_s=400 * 0.008, decodes=30, decoded=60, decode_s=30 * 0.0085)
    line = act.line(105.0, DeviceTimes(busy_s=4.5, gap_s=0.04, codec_s=2.5))
    points = "step times (tokens: ms): " + ", ".join(f"{n}: {ms:.2f}" for n, ms in ((256, 1.47), (512, 1.79)))
    log = "\n".join([_worker_log_line(points), "something else", _worker_log_line("worker 0: " + line)])
    assert parse_step_times(log) == [[256, 1.47], [512, 1.79]]
    rows = parse_activity(log)
    assert len(rows) == 1
    row = rows[0]
    assert row["steps_per_s"] == 80 and row["items"] == 48 and row["tokens"] == 5400
    assert row["host_ms"] == 8 and row["gap_ms"] == 0.1 and row["codec_pct"] == 50
    assert row["decodes"] == 30 and row["decoded"] == 60 and row["decode_ms"] == 8.5
    summary = run_activity(rows, row["t"] - 1, row["t"])
    assert summary is not None and summary["tokens_per_step"] == 5400
    assert run_activity(rows, row["t"] + 10, row["t"] + 20) is None
    assert parse_step_times("no such line") is None


def test_the_sim_runs_on_measured_costs_and_refuses_like_the_worker() -> None:
    from omnivoice_sched_sim import Cost, Knobs, sim_conversations, sim_load

    cost = Cost.measured(load_costs(RESULTS / "h200_costs.json"))
    knobs = Knobs(admit_ms=0.0, latency_batch_tokens=1024, max_batch_tokens=6144, target_chars=60,
                  admission_wait_ms=1000.0)
    r = sim_conversations(knobs, cost, 20)
    assert r["turns"] == 40 and r["refused_turns"] == 0 and 0 < r["p50_ms"] <= r["p95_ms"] < 1000
    assert r["gpu_s"] > 0 and r["codec_s"] > 0 and r["segments"] > 40
    # 3x the card's throughput offered: the admission rule refuses some, everything else is served
    over = sim_load(knobs, cost, 600, 400.0)
    assert over["refused"] > 0 and over["served"] + over["refused"] == 600
    assert sim_load(knobs, cost, 100, 20.0)["refused"] == 0
    # voice continuity: later segments carry the first one's codes (more tokens per step)
    more = sim_conversations(replace(knobs, continuity=True), cost, 20)
    assert more["tokens_per_step"] * more["steps"] > r["tokens_per_step"] * r["steps"]


def test_the_sims_token_counts_are_the_models(tmp_path: Path) -> None:
    """The sim's tokens per segment (what the step staircase is read at) = sequence.prepare's on a checkpoint
    with the serving bench's word tokenizer, with and without voice continuity's prompt."""
    import torch
    from omnivoice_bench import write_word_tokenizer
    from omnivoice_sched_sim import REPLIES, SHORT_INPUTS, item_tokens, reply_units

    from realtime_tts import model as ov
    from realtime_tts.model.checkpoint import build_random_checkpoint

    build_random_checkpoint(str(tmp_path), size="tiny", seed=0)
    write_word_tokenizer(tmp_path)
    model = ov.OmniVoiceModel.from_pretrained(str(tmp_path), dtype="fp32", device="cpu")
    for text in SHORT_INPUTS:
        item = ov.prepare(model, text)
        assert item_tokens(text) == (item.num_tokens, item.num_frames), text
    for reply in REPLIES[:3]:
        first, *later = [u for _, u in reply_units(reply, 12.0, 60)[1]]
        frames = item_tokens(first)[1]
        prompt = ov.ClonePrompt(torch.zeros(8, frames, dtype=torch.long), first, 0.1)
        for unit in later:
            item = ov.prepare(model, unit, prompt=prompt)
            assert item_tokens(unit, (first, frames)) == (item.num_tokens, item.num_frames), unit
