#!/usr/bin/env bash
# One device call on the H200 (see /work/.library/device), ≤ 6 minutes: install the carried wheels (.gpuwhl:
# the web stack, hibari-tts, omnivoice 0.2.1 as oracle, soundfile/pydub), then the serving benchmark through
# the real server at full size with the current scheduler (latency budget that never holds first segments
# back; CUDA graphs captured at start-up), then, in the time left, the same bench with a fixed 4096-token
# step budget and no admission interval (the old scheduling rules under load) side by side. Everything lands
# in $OUT.
#   AGENTS (1,25,50,100) LOAD (1000) RATE (100): the new run; OLD_AGENTS (25,100) OLD_LOAD (1000): the
#   fixed-budget run (OLD=0 skips it); GPU_TESTS=1 runs the GPU-marked engine tests first (~1 min).
set -uo pipefail
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpuwhl/*.whl || exit 1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu_info.txt"
if [ "${GPU_TESTS:-0}" = 1 ]; then
    timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/engine 2>&1 | tee "$OUT/gpu_tests_h200.txt" | tail -5
fi
ckpt=/tmp/omnivoice-full
# SIGINT on timeout: the bench's finally stops its server, so the next run gets the GPU to itself.
timeout -s INT $((330 - (SECONDS - start) - ${OLD_RESERVE_S:-120})) python3 bench/omnivoice_serve.py --ckpt "$ckpt" \
    --build full --word-tokenizer --agents "${AGENTS:-1,25,50,100}" --load "${LOAD:-1000}" --rate "${RATE:-100}" \
    --out-dir "$OUT" --name omnivoice_serve_h200 > "$OUT/serve_new.log" 2>&1
echo "new run: rc $? at $((SECONDS - start)) s"
grep -E '^(agents|load|server healthy|built) ' "$OUT/serve_new.log"
grep -E "serving graph buckets" "$OUT/serve_new.log"
echo "graphs captured after start-up: $(sed -n '/serving graph buckets/,$p' "$OUT/serve_new.log" | grep -c 'captured step graph')"
left=$((345 - (SECONDS - start)))
if [ "${OLD:-1}" = 1 ] && [ "$left" -gt 60 ]; then
    timeout -s INT "$left" python3 bench/omnivoice_serve.py --ckpt "$ckpt" --agents "${OLD_AGENTS:-25,100}" \
        --load "${OLD_LOAD:-1000}" --rate "${RATE:-100}" --server-args "--max-batch-tokens 4096 --latency-batch-tokens 0 --admit-interval-ms 0" \
        --out-dir "$OUT" --name omnivoice_serve_h200_budget4096 > "$OUT/serve_budget4096.log" 2>&1
    echo "fixed-4096 run: rc $? at $((SECONDS - start)) s"
    grep -E '^(agents|load|server healthy) |serving graph buckets' "$OUT/serve_budget4096.log"
fi
