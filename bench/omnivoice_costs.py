"""The scheduler simulation's cost file (bench/omnivoice_sched_sim.py --costs FILE): what one OmniVoice worker's
step loop and codec cost on a device, taken from device measurements, never fitted to the latencies the sim
predicts. Owns the file's schema, its validation (errors name the field) and its making from a device run's
outputs. Plain Python: imports neither torch nor the package.

    # from a serving run (bench/omnivoice_serve.py writes OUT/<name>.json) and a step-loop run's rows
    .venv/bin/python bench/omnivoice_costs.py --serve OUT/omnivoice_serve_h200.json \\
        --steploop OUT/omnivoice_steploop.jsonl --out bench/results/h200_costs.json

The step-time staircase comes from the worker's start-up timing (ModelBackend._time_steps, one step per token
bucket on a full batch of 2.4 s sentences: "step times (tokens: ms)" in the worker's log, saved by the serving
bench), else from BASE_BUCKET_MS (an older start-up timing) rescaled to the step-loop bench's GPU busy ms per
step at its sizes. The loop's host work and GPU gaps per step and the codec's device time per segment come from
the serving run's server-side figures (/metrics differences per run).
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VERSION = 1

# The worker's start-up step times on the H200 (run 8's "step times (tokens: ms)", bf16, CUDA graphs, full
# batches of 2.4 s sentences; bench/results/HISTORY.md): the staircase's shape when a run saved none of its own.
BASE_BUCKET_MS = {256: 1.70, 512: 2.07, 768: 2.53, 1024: 2.94, 1280: 3.46, 1536: 3.92, 1792: 4.57, 2048: 4.86,
                  2560: 5.58, 3072: 6.58, 3584: 7.56, 4096: 8.17, 4608: 9.41, 5120: 10.23, 5632: 11.12,
                  6144: 12.23, 7168: 13.94, 8192: 15.26, 9216: 18.69, 10240: 19.51, 12288: 23.37, 14336: 28.84,
                  16384: 31.10}


class CostFileError(ValueError):
    """A cost file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class StepCost:
    """Device time of one diffusion step: the measured time of its CUDA-graph token bucket (a step of n tokens
    costs the smallest bucket holding n; past the last bucket, its ms per token)."""

    bucket_ms: tuple[tuple[int, float], ...]

    def ms(self, tokens: int) -> float:
        tops = [t for t, _ in self.bucket_ms]
        i = bisect.bisect_left(tops, tokens)
        if i < len(tops):
            return self.bucket_ms[i][1]
        top, ms = self.bucket_ms[-1]
        return ms * tokens / top


@dataclass(frozen=True)
class LoopCost:
    """The step loop around the device: it runs ahead of the GPU (at most 2 steps), so a step's period is its
    device time + the GPU's idle gap before it, unless the loop's own host work per step is longer."""

    gap_ms: float
    gap_ms_per_item: float
    host_ms: float
    host_ms_per_item: float

    def period_ms(self, engine_ms: float, items: int) -> float:
        return max(engine_ms + self.gap_ms + self.gap_ms_per_item * items,
                   self.host_ms + self.host_ms_per_item * items)


@dataclass(frozen=True)
class CodecCost:
    """One decode call of the decode thread: call_ms + item_ms per segment + length_ms per distinct length +
    frame_ms per frame, frames counted as their sum ("sum": per-segment or per-length forwards) or as segments ×
    the longest ("padded": one batched forward over lengths padded to the longest)."""

    call_ms: float
    item_ms: float
    length_ms: float
    frame_ms: float
    frames: str  # sum | padded

    def ms(self, frames: list[int]) -> float:
        if not frames:
            return 0.0
        counted = sum(frames) if self.frames == "sum" else len(frames) * max(frames)
        return (self.call_ms + self.item_ms * len(frames) + self.length_ms * len(set(frames))
                + self.frame_ms * counted)


@dataclass(frozen=True)
class Interference:
    """Step and codec sharing the device: a step overlapping a decode call takes (1 + contention × frames of the
    call / 1000) × its device time; a call beside big steps takes (1 + decode_slow × tokens of the last step /
    4096) × its time. 0 where the measured figures already include the sharing."""

    contention: float
    decode_slow: float


@dataclass(frozen=True)
class CostModel:
    step: StepCost
    loop: LoopCost
    codec: CodecCost
    interference: Interference
    provenance: dict[str, Any]
    device: str


def _field(doc: Any, path: str, kind: type | tuple[type, ...], src: str) -> Any:
    node = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise CostFileError(f"{src}: missing field '{path}'")
        node = node[part]
    if kind is float and isinstance(node, int) and not isinstance(node, bool):
        node = float(node)
    if not isinstance(node, kind) or isinstance(node, bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise CostFileError(f"{src}: field '{path}' must be a {want}, got {node!r}")
    return node


def _number(doc: Any, path: str, src: str, *, positive: bool = False) -> float:
    x = _field(doc, path, float, src)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise CostFileError(f"{src}: field '{path}' must be a finite number {'> 0' if positive else '>= 0'}, got {x!r}")
    return float(x)


def parse_costs(doc: Any, src: str = "cost file") -> CostModel:
    """A cost file's JSON → CostModel; CostFileError naming the field on anything missing or out of range."""
    if not isinstance(doc, dict):
        raise CostFileError(f"{src}: expected a JSON object, got {type(doc).__name__}")
    version = _field(doc, "version", int, src)
    if version != VERSION:
        raise CostFileError(f"{src}: field 'version' is {version}, this sim reads version {VERSION}")
    prov = _field(doc, "provenance", dict, src)
    for key in ("command", "commit", "date"):
        _field(doc, f"provenance.{key}", str, src)
    points = _field(doc, "step.bucket_ms", list, src)
    buckets: list[tuple[int, float]] = []
    for i, p in enumerate(points):
        if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], int | float)
                and not isinstance(p[1], bool) and p[0] > 0 and math.isfinite(p[1]) and p[1] > 0):
            raise CostFileError(f"{src}: field 'step.bucket_ms[{i}]' must be [tokens > 0, ms > 0], got {p!r}")
        if buckets and p[0] <= buckets[-1][0]:
            raise CostFileError(f"{src}: field 'step.bucket_ms' must rise in tokens: {p[0]} after {buckets[-1][0]}")
        buckets.append((int(p[0]), float(p[1])))
    if len(buckets) < 2:
        raise CostFileError(f"{src}: field 'step.bucket_ms' needs at least 2 buckets, got {len(buckets)}")
    loop = LoopCost(*(_number(doc, f"loop.{k}", src) for k in ("gap_ms", "gap_ms_per_item", "host_ms",
                                                                 "host_ms_per_item")))
    frames = _field(doc, "codec.frames", str, src)
    if frames not in ("sum", "padded"):
        raise CostFileError(f"{src}: field 'codec.frames' must be 'sum' or 'padded', got {frames!r}")
    codec = CodecCost(*(_number(doc, f"codec.{k}", src) for k in ("call_ms", "item_ms", "length_ms", "frame_ms")),
                      frames=frames)
    if codec.ms([1]) <= 0:
        raise CostFileError(f"{src}: field 'codec' gives a decode call no cost (all of call_ms, item_ms, length_ms, "
                            "frame_ms are 0)")
    inter = Interference(_number(doc, "interference.contention", src), _number(doc, "interference.decode_slow", src))
    return CostModel(StepCost(tuple(buckets)), loop, codec, inter, dict(prov), str(doc.get("device", "?")))


def load_costs(path: str | Path) -> CostModel:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise CostFileError(f"{p}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CostFileError(f"{p}: not JSON: {exc}") from None
    return parse_costs(doc, str(p))


# ------------------------------------------------------------------------------- the worker's log lines ---

_STEP_TIMES = re.compile(r"step times \(tokens: ms\): (.*)$")
_ACTIVITY = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) worker(?P<worker>\d+) INFO \S+: worker \d+: "
    r"(?P<steps_per_s>[\d.]+) steps/s, (?P<items>[\d.]+) items and (?P<tokens>[\d.]+) tokens per step, "
    r"step (?P<step_ms>[\d.]+) ms in backend.step of which (?P<host_ms>[\d.]+) ms host work .*?"
    r"GPU (?P<gpu_pct>[\d.]+)% busy in steps, idle gaps (?P<gap_ms>[\d.]+) ms per step, "
    r"codec (?P<codec_pct>[\d.]+)% of the GPU, (?P<decodes>\d+) decodes of (?P<decoded>\d+) segments, "
    r"(?P<decode_ms>[\d.]+) ms each")
# Later fields of the same line (newer workers): segments admitted in the window and their mean tokens per step.
_ADMITTED = re.compile(r"(?P<admitted>\d+) segments admitted of (?P<segment_tokens>[\d.]+) tokens each")


def parse_step_times(log: str) -> list[list[float]] | None:
    """The worker's start-up step times ("step times (tokens: ms): 256: 1.70, ...") → [[tokens, ms], ...] (the
    last such line: a restarted worker measures again); None when the log has none."""
    found = None
    for line in log.splitlines():
        m = _STEP_TIMES.search(line)
        if m:
            pairs = [p.split(":") for p in m.group(1).split(",") if ":" in p]
            found = [[int(t), float(ms)] for t, ms in pairs]
    return found


def parse_activity(log: str) -> list[dict[str, float]]:
    """The worker's activity lines (one per 5 s window while busy, gpu_worker/loop._Activity.line) → dicts
    with the window's end time (epoch seconds, the log's local time), steps/s, items and tokens per step, ms
    per step in backend.step and of host work, GPU busy %, idle gap ms per step, codec % of the GPU, decode
    calls, segments decoded and ms per decode call (the decode thread's wall time: codec + copy + send)."""
    out = []
    for line in log.splitlines():
        m = _ACTIVITY.search(line)
        if m is None:
            continue
        row: dict[str, float] = {k: float(v) for k, v in m.groupdict().items() if k != "at"}
        row["t"] = dt.datetime.strptime(m.group("at"), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        admitted = _ADMITTED.search(line)
        if admitted is not None:
            row.update({k: float(v) for k, v in admitted.groupdict().items()})
        out.append(row)
    return out


def run_activity(activity: list[dict[str, float]], start: float, end: float,
                 window_s: float = 5.0) -> dict[str, float] | None:
    """The activity windows of one run [start, end] (a window ends within it or up to one window after) →
    step-weighted means of tokens and items per step, and decode calls, segments, ms per call; None if none."""
    rows = [a for a in activity if start < a["t"] <= end + window_s]
    steps = sum(a["steps_per_s"] for a in rows)
    if not rows or steps <= 0:
        return None
    decodes = sum(a["decodes"] for a in rows)
    admitted = sum(a.get("admitted", 0.0) for a in rows)
    return {"windows": len(rows),
            "segments_admitted": admitted,
            "tokens_per_segment": sum(a.get("admitted", 0.0) * a.get("segment_tokens", 0.0) for a in rows) / admitted
            if admitted else float("nan"),
            "tokens_per_step": sum(a["tokens"] * a["steps_per_s"] for a in rows) / steps,
            "items_per_step": sum(a["items"] * a["steps_per_s"] for a in rows) / steps,
            "decodes": decodes, "decoded": sum(a["decoded"] for a in rows),
            "decode_ms": sum(a["decode_ms"] * a["decodes"] for a in rows) / decodes if decodes else float("nan")}


# ------------------------------------------------------------------------------ making a file from a run ---

def _least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """y ≈ a + b x, both clamped at 0 (a cost); b = 0 and a = mean when x does not vary."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if n < 2 or var <= 1e-9:
        return max(0.0, my), 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    a = my - b * mx
    if b < 0:
        return max(0.0, my), 0.0
    if a < 0:
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


def staircase_from_steploop(rows: list[dict[str, Any]],
                            base: dict[int, float] = BASE_BUCKET_MS) -> tuple[list[tuple[int, float]], list[str]]:
    """BASE staircase rescaled to the step-loop bench's GPU busy ms per step: at each measured size the ratio
    measured / base bucket, interpolated in log(tokens) between sizes, held past the ends. → (buckets, notes)."""
    tops = sorted(base)
    by_bucket: dict[int, list[float]] = {}
    for r in rows:
        tokens, busy = float(r["tokens_per_step"]), float(r["gpu_busy_ms_per_step"])
        top = tops[min(bisect.bisect_left(tops, math.ceil(tokens)), len(tops) - 1)]
        by_bucket.setdefault(top, []).append(busy / base[top])
    if not by_bucket:
        raise CostFileError("steploop: no rows with tokens_per_step and gpu_busy_ms_per_step")
    anchors = sorted((t, sum(v) / len(v)) for t, v in by_bucket.items())
    notes = [f"bucket {t}: measured/base {r:.3f}" for t, r in anchors]

    def ratio(t: int) -> float:
        if t <= anchors[0][0]:
            return anchors[0][1]
        if t >= anchors[-1][0]:
            return anchors[-1][1]
        for (t0, r0), (t1, r1) in pairwise(anchors):
            if t0 <= t <= t1:
                w = (math.log(t) - math.log(t0)) / (math.log(t1) - math.log(t0))
                return r0 + w * (r1 - r0)
        return anchors[-1][1]

    return [(t, round(base[t] * ratio(t), 3)) for t in tops], notes


def make_costs(serve: dict[str, Any] | None, steploop: list[dict[str, Any]], command: str,
               codec_override: dict[str, Any] | None = None) -> dict[str, Any]:
    """A cost file (dict) from a serving bench's JSON (omnivoice_serve.py) and/or step-loop rows."""
    sources: list[str] = []
    runs = [] if serve is None else [*serve.get("agents", []), *serve.get("loads", [])]
    points = None if serve is None else serve.get("step_points_ms")
    if points:
        buckets = [(int(t), float(ms)) for t, ms in points]
        step_src = "the worker's start-up step times (ModelBackend._time_steps) of the serving run"
    elif steploop:
        buckets, notes = staircase_from_steploop(steploop)
        step_src = ("BASE_BUCKET_MS (H200 run 8's start-up step times) rescaled to the step-loop bench's GPU busy "
                    "ms per step (" + "; ".join(notes) + ")")
    else:
        raise CostFileError("no step times: the serving JSON has no step_points_ms and no --steploop rows were given")
    sources.append(step_src)
    # per run: (mean batch items, host ms/step, gap ms/step, codec s, segments)
    figs = [(r["server"]["batch_items_mean"], 1000 * r["server"]["host_s"] / r["server"]["steps"],
             1000 * r["server"]["gpu_gap_s"] / r["server"]["steps"], r["server"]["codec_s"], r["server"]["segments"])
            for r in runs if r.get("server", {}).get("steps")]
    if figs:
        items = [f[0] for f in figs]
        host_a, host_b = _least_squares(items, [f[1] for f in figs])
        gap_a, gap_b = _least_squares(items, [f[2] for f in figs])
        codec_item = 1000 * sum(f[3] for f in figs) / max(1.0, sum(f[4] for f in figs))
        loop_src = (f"least squares over the serving run's {len(figs)} runs (server /metrics: host_s / steps and "
                    "gpu_gap_s / steps against the mean batch items per segment)")
        codec_src = (f"the serving run's codec device seconds / segments decoded over its {len(figs)} runs "
                     f"({sum(f[3] for f in figs):.2f} s / {sum(f[4] for f in figs):.0f}): one CUDA-graph replay "
                     "per segment (B=1, codec_graph_frames), timed on the decode stream beside the steps, so "
                     "it includes their interference; its frame dependence is not resolved by these runs")
    elif steploop:
        rows = steploop
        host_a, host_b = _least_squares([r["items_per_step"] for r in rows], [r["host_ms_per_step"] for r in rows])
        gap_a, gap_b = _least_squares([r["items_per_step"] for r in rows], [r["gpu_gap_ms_per_step"] for r in rows])
        codec_item = 3.2
        loop_src = "least squares over the step-loop bench's rows (host ms and GPU gap ms per step against items)"
        codec_src = "no serving run given: 3.2 ms per segment (B=1 graph replays; issue 16's H200 serving run)"
    else:
        raise CostFileError("no loop figures: give a serving JSON with server figures, or --steploop rows")
    sources += [loop_src, codec_src]
    # The decode thread's wall time per call beyond the codec's device time (copy to the host, loudness and
    # fades, the send): from the worker's activity lines where the run saved them.
    call_ms = 0.0
    timed = [r for r in runs if (r.get("activity") or {}).get("decodes") and r.get("server", {}).get("steps")]
    if timed:
        calls = sum(r["activity"]["decodes"] for r in timed)
        wall_ms = sum(r["activity"]["decodes"] * r["activity"]["decode_ms"] for r in timed)
        device_ms = 1000 * sum(r["server"]["codec_s"] for r in timed)
        call_ms = max(0.0, (wall_ms - device_ms) / calls)
        codec_src += (f"; call_ms: the decode thread's wall ms per call less the codec's device ms, from the worker's "
                      f"activity lines of {len(timed)} runs ({calls:.0f} calls)")
    codec = {"call_ms": round(call_ms, 3), "item_ms": round(codec_item, 3), "length_ms": 0.0, "frame_ms": 0.0,
             "frames": "sum", "source": codec_src}
    if codec_override:
        codec.update(codec_override)
        codec["source"] = str(codec_override.get("source", "given with --codec"))
        sources.append("codec: " + codec["source"])
    doc = {
        "version": VERSION,
        "device": (serve or {}).get("device", "?"),
        "provenance": {"command": command, "commit": _commit(), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                       "serve_run": None if serve is None else {k: serve.get(k) for k in ("command", "commit", "date")},
                       "sources": sources},
        "step": {"bucket_ms": [[t, ms] for t, ms in buckets], "source": step_src},
        "loop": {"gap_ms": round(gap_a, 4), "gap_ms_per_item": round(gap_b, 5), "host_ms": round(host_a, 4),
                 "host_ms_per_item": round(host_b, 5), "source": loop_src},
        "codec": codec,
        "interference": {"contention": 0.0, "decode_slow": 0.0,
                         "source": "0: the step times (steploop GPU busy) and the codec's device time per segment "
                                   "were both measured with the other running beside them"},
    }
    parse_costs(doc, "made cost file")  # what is written must load
    return doc


def dump_costs(doc: dict[str, Any]) -> str:
    """The file's text: indented, a [tokens, ms] pair per line."""
    return re.sub(r"\[\s+(\d+),\s+([-\d.e]+)\s+\]", r"[\1, \2]", json.dumps(doc, indent=1)) + "\n"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", help="the serving bench's JSON (bench/omnivoice_serve.py: OUT/<name>.json)")
    p.add_argument("--steploop", help="the step-loop bench's rows (OUT/omnivoice_steploop.jsonl)")
    p.add_argument("--codec", help="JSON object overriding codec fields (call_ms, item_ms, length_ms, frame_ms, "
                                   "frames, source), e.g. from a codec bench")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    serve = json.loads(Path(args.serve).read_text()) if args.serve else None
    rows = [json.loads(line) for line in Path(args.steploop).read_text().splitlines() if line.strip()] \
        if args.steploop else []
    codec = json.loads(Path(args.codec).read_text()) if args.codec else None
    command = " ".join([Path(sys.executable).name, *sys.argv])
    try:
        doc = make_costs(serve, rows, command, codec)
    except CostFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    text = dump_costs(doc)
    Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
