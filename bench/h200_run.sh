#!/usr/bin/env bash
# One device call on the H200 (see /work/.library/device): install the carried wheels (.gpuwhl: the web
# stack, hibari-tts, omnivoice 0.2.1 as oracle, soundfile/pydub), run every GPU-marked test, then the serving
# benchmark through the real server at full size. Everything lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpuwhl/*.whl || exit 1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu_info.txt"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/engine 2>&1 | tee "$OUT/gpu_tests_h200.txt" | tail -25
timeout 330 python3 bench/omnivoice_serve.py --build full --word-tokenizer --agents "${AGENTS:-1,25,50,100}" \
    --load "${LOAD:-1000}" --rate "${RATE:-100}" --out-dir "$OUT" --name omnivoice_serve_h200 2>&1 | tail -60
