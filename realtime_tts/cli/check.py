"""`realtime-tts check`: what this host would serve with this configuration — engines, devices, model,
capabilities — and whether the card and the model fit, without starting a server.

Runs the CPU voice once (a real synthesis), resolves --model (local dir or hub id, as the server would),
reads the checkpoint's safetensors headers for its parameter count, and asks nvidia-smi for the cards' memory.
Exit status: 0 all good, 1 something configured cannot work, 2 a config error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

from realtime_tts import config as config_mod
from realtime_tts.cli import options

GIB = 1 << 30
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1}
# Beyond the weights: CUDA context + cuBLAS/Triton workspaces + captured codec graphs (measured ~1-2 GiB on the
# H200 in bench/results), and the diffusion step's activations, ~32 bytes per hidden unit per batch token.
_CONTEXT_BYTES = 2 * GIB
_ACTIVATION_BYTES_PER_UNIT = 32


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("check", help="check engines, devices, model and whether they fit (no server started)",
                       description="Print what `serve` with the same settings would run on this host.")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    options.add_config_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cfg = options.load(args)
    if cfg is None:
        return 2
    report = build_report(cfg, getattr(args, "config", None))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(report)
    return 0 if report["ok"] else 1


def build_report(cfg: config_mod.Config, config_flag: str | None) -> dict[str, Any]:
    import os

    problems: list[str] = []
    cfg_file = Path(config_flag) if config_flag else config_mod.find_config_file(os.environ)
    report: dict[str, Any] = {
        "config_file": str(cfg_file) if cfg_file else None,
        "listen": f"{cfg.server.host}:{cfg.server.port}",
        "cpu_voice": _cpu_voice(cfg, problems),
        "gpus": _gpus(),
    }
    from realtime_tts.engine.pool import EnginePool  # builds the engines' descriptions; starts nothing

    pool = EnginePool(cfg)
    report["default_engine"] = pool.default
    report["capabilities"] = {name: {"model": e.capabilities.model, "device": e.capabilities.device,
                                     "voice_modes": sorted(e.capabilities.voice_modes),
                                     "languages": list(e.capabilities.languages or ["many"]),
                                     "sample_rate": e.capabilities.sample_rate}
                              for name, e in pool.engines.items()}
    if cfg.omnivoice.model:
        report["model"] = _model(cfg, report["gpus"], problems)
    else:
        report["model"] = None
    report["problems"] = problems
    report["ok"] = not problems
    return report


def _cpu_voice(cfg: config_mod.Config, problems: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"workers": cfg.cpu.cpu_workers or os_cpus(), "threads_per_worker":
                           cfg.cpu.cpu_threads_per_worker}
    try:
        from hibari import Hibari

        from realtime_tts.engine.cpu import VOICE

        t0 = time.perf_counter()
        tts = Hibari(voice=VOICE, threads=1)
        t1 = time.perf_counter()
        audio = tts("The voice works.", seed=0)
        t2 = time.perf_counter()
        samples = len(audio[0] if isinstance(audio, tuple) else audio)
        out.update(status="ok", load_s=round(t1 - t0, 2), synth_s=round(t2 - t1, 3),
                   audio_s=round(samples / 24_000, 2))
    except Exception as e:  # noqa: BLE001 — reported, not raised: check lists every problem it finds
        out.update(status="error", detail=f"{type(e).__name__}: {e}")
        problems.append(f"the CPU voice does not load: {e}")
    return out


def os_cpus() -> int:
    import os

    return os.cpu_count() or 1


def _gpus() -> list[dict[str, Any]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5:
            index, name, total, used, free = parts
            gpus.append({"index": int(index), "name": name, "memory_total_bytes": int(total) << 20,
                         "memory_used_bytes": int(used) << 20, "memory_free_bytes": int(free) << 20})
    return gpus


def _model(cfg: config_mod.Config, gpus: list[dict[str, Any]], problems: list[str]) -> dict[str, Any]:
    from realtime_tts import hub
    from realtime_tts.errors import EngineUnavailable

    out: dict[str, Any] = {"model": cfg.omnivoice.model, "hub_id": None, "dtype": cfg.omnivoice.dtype}
    ref = hub.hub_id(cfg.omnivoice.model or "")
    out["hub_id"] = ref[0] if ref else None
    try:
        path = hub.resolve(cfg.omnivoice.model or "")
    except EngineUnavailable as e:
        problems.append(e.message)
        out["status"] = "error"
        return out
    out["path"] = str(path)
    llm = _params(sorted(path.glob("*.safetensors")))
    codec = _params(sorted((path / "audio_tokenizer").glob("*.safetensors")))
    if not llm["params"]:
        problems.append(f"{path}: no *.safetensors weights")
        out["status"] = "error"
        return out
    hidden = _hidden_size(path)
    weights = llm["params"] * _DTYPE_BYTES[cfg.omnivoice.dtype] + codec["params"] * 4
    activations = cfg.omnivoice.max_batch_tokens * hidden * _ACTIVATION_BYTES_PER_UNIT
    need = weights + activations + _CONTEXT_BYTES
    out.update(status="ok", params=llm["params"], codec_params=codec["params"], hidden_size=hidden,
               estimate_bytes={"weights": weights, "activations": activations, "context": _CONTEXT_BYTES,
                               "total": need})
    device = cfg.omnivoice.device
    if device == "cpu" or not gpus:
        out["fit"] = "runs on the CPU (device=cpu or no NVIDIA GPU): works, far from real time for a full model"
        if device == "cuda":
            problems.append("device=cuda but no NVIDIA GPU was found (nvidia-smi)")
        return out
    count = cfg.omnivoice.gpus or len(gpus)
    fits = []
    for g in gpus[:count]:
        ok = g["memory_free_bytes"] >= need
        fits.append({"index": g["index"], "fits": ok, "free_bytes": g["memory_free_bytes"]})
        if not ok:
            problems.append(f"GPU {g['index']} ({g['name']}): needs ~{need / GIB:.1f} GiB, "
                            f"{g['memory_free_bytes'] / GIB:.1f} GiB free")
    out["fit"] = fits
    return out


def _params(files: list[Path]) -> dict[str, int]:
    """Parameter count from safetensors headers (8-byte length + JSON), without loading a tensor."""
    total = 0
    for f in files:
        with f.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        for name, meta in header.items():
            if name != "__metadata__":
                n = 1
                for dim in meta["shape"]:
                    n *= dim
                total += n
    return {"params": total}


def _hidden_size(path: Path) -> int:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return 1024
    llm = cfg.get("llm_config") or cfg.get("text_config") or cfg
    return int(llm.get("hidden_size", 1024))


def print_report(r: dict[str, Any]) -> None:
    print(f"config file : {r['config_file'] or '(none: defaults, env vars and flags)'}")
    print(f"listen      : {r['listen']}")
    cv = r["cpu_voice"]
    if cv.get("status") == "ok":
        print(f"cpu voice   : ok — {cv['workers']} worker(s); loaded in {cv['load_s']} s, "
              f"{cv['audio_s']} s of audio in {cv['synth_s']} s")
    else:
        print(f"cpu voice   : ERROR {cv.get('detail')}")
    if r["gpus"]:
        for g in r["gpus"]:
            print(f"gpu {g['index']}       : {g['name']}, {g['memory_free_bytes'] / GIB:.1f} of "
                  f"{g['memory_total_bytes'] / GIB:.1f} GiB free")
    else:
        print("gpus        : none (no nvidia-smi or no NVIDIA GPU)")
    print(f"default     : {r['default_engine']} engine")
    for name, c in r["capabilities"].items():
        print(f"engine {name:<5}: model {c['model']} on {c['device']}; voice modes {', '.join(c['voice_modes'])}; "
              f"languages {', '.join(c['languages'])}; {c['sample_rate']} Hz")
    m = r["model"]
    if m is None:
        print("model       : none (--model unset: the CPU voice only)")
    elif m.get("status") == "ok":
        est = m["estimate_bytes"]
        print(f"model       : {m['model']} -> {m['path']}")
        print(f"              {m['params'] / 1e6:.1f} M parameters + codec {m['codec_params'] / 1e6:.1f} M, "
              f"dtype {m['dtype']}; needs ~{est['total'] / GIB:.1f} GiB per GPU (weights "
              f"{est['weights'] / GIB:.2f} + activations {est['activations'] / GIB:.2f} + context "
              f"{est['context'] / GIB:.0f}; an estimate)")
        fit = m["fit"]
        if isinstance(fit, str):
            print(f"fit         : {fit}")
        else:
            for f in fit:
                print(f"fit gpu {f['index']}   : {'yes' if f['fits'] else 'NO'} ({f['free_bytes'] / GIB:.1f} GiB free)")
    for p in r["problems"]:
        print(f"PROBLEM     : {p}")
    print("check       : " + ("ok" if r["ok"] else f"{len(r['problems'])} problem(s)"))
