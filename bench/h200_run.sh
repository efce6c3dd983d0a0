#!/usr/bin/env bash
# First, here (PyPI reachable): bash bench/gpu_wheels.sh — it makes .gpuwhl/, the wheels this installs; name
# .gpuwhl in the device call's carry. WHEELS=DIR installs from another folder (e.g. ../.gpuwhl when the
# checkout travels in a subfolder).
# One device call on the H200 (see /work/.library/device), under 10 minutes: install the carried wheels
# (.gpuwhl: the web stack, hibari-tts, omnivoice 0.2.1 as the oracle, soundfile/pydub), then, each when its
# flag is 1 and time is left:
#   GPU_TESTS  the GPU-marked tests in tests/engine + tests/gpu_worker (~1-2 min), then GPU_TEST_FILES
#                                                                            → $OUT/gpu_tests_h200.txt
#   GEMM       bench/omnivoice_gemm.py: the backbone's projections, cuBLAS vs our Triton matmuls (~3 min)
#                                                                            → $OUT/omnivoice_gemm.{md,jsonl}
#   BULK       bench/omnivoice_bench.py (ours; the reference too unless BULK_ARGS has --no-ref), BULK_S budget
#                                                                            → $OUT/omnivoice_bench.{md,jsonl}
#              BULK_B_ARGS: then the same again with these flags (each gets half the budget) → $OUT/b/
#   STEPLOOP   bench/omnivoice_steploop.py: the worker loop's host ms per step and the GPU's idle gaps between
#              steps at STEPLOOP_ITEMS (8,32,64,128) items in flight, this tree, and first, with STEPLOOP_BEFORE=DIR,
#              the tree at DIR (e.g. .. when this checkout travels inside another)  → $OUT/omnivoice_steploop.md
#   SERVE      bench/omnivoice_serve.py through the real server: AGENTS (1,25,50,100), LOAD (1000) at RATE (100)
#              req/s (comma lists: one load run each), extra server flags in SERVER_ARGS, extra bench flags in
#              SERVE_BENCH_ARGS (e.g. '--turns 2 --gap-s 2 --barge-in 0.2 --ramp-s 4')  → $OUT/$SERVE_NAME.md
#              SERVE_B_ARGS: then the same again with these server flags    → $OUT/${SERVE_NAME}_b.md
#   CODEC      bench/omnivoice_codec.py: decode jobs of CODEC_JOBS (1,4,16,64) segments of 40-90 frames, batch-1
#              graphs per length vs padded masked batches, device ms per job and per audio s; extra flags in
#              CODEC_ARGS                                                   → $OUT/omnivoice_codec_h200.{md,jsonl}
#   CONTINUITY bench/omnivoice_continuity.py: one voice per conversation on vs off through the real server,
#              agents CONT_AGENTS (1,25,100) and CONT_BULK (64) long texts  → $OUT/omnivoice_continuity.md
#   FP8PROBE   bench/omnivoice_serve.py with --fp8-matmuls true (FP8_AGENTS agents, FP8_LOAD requests), py-spy
#              dumps of every worker process every 3 s while it runs, one file (a worker that stops answering shows where
#              its threads are; needs the py-spy wheel in .gpuwhl)          → $OUT/fp8/
# Logs of every stage land in $OUT/run.log. BUDGET_S (560) bounds the whole call.
set -uo pipefail
start=$SECONDS
log="$OUT/run.log"
left() { echo $(( ${BUDGET_S:-560} - (SECONDS - start) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS:-.gpuwhl}"/*.whl || exit 1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$log"
git log --oneline -1 >> "$log" 2>/dev/null
ckpt=/tmp/omnivoice-full
if [ "${GPU_TESTS:-0}" = 1 ]; then
    # the gpu-marked tests (web side: the GPU client; worker side: loop, runner, graphs, kernels), then
    # GPU_TEST_FILES (unmarked tests that run on CUDA when it is there)
    timeout "${TESTS_S:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/engine tests/gpu_worker > "$OUT/gpu_tests_h200.txt" 2>&1; tail -5 "$OUT/gpu_tests_h200.txt"
    if [ -n "${GPU_TEST_FILES:-}" ]; then
        echo "# CUDA run of: $GPU_TEST_FILES" >> "$OUT/gpu_tests_h200.txt"
        timeout "${TESTS_S:-300}" python3 -m pytest -q -p no:cacheprovider $GPU_TEST_FILES >> "$OUT/gpu_tests_h200.txt" 2>&1; tail -3 "$OUT/gpu_tests_h200.txt"
    fi
    echo "gpu tests done at $((SECONDS - start)) s" | tee -a "$log"
fi
if [ "${FP8PROBE:-0}" = 1 ] && [ "$(left)" -gt 90 ]; then
    mkdir -p "$OUT/fp8"
    build=$([ -f "$ckpt/model.safetensors" ] || echo "--build full --word-tokenizer")
    timeout -s INT "${FP8_S:-200}" python3 bench/omnivoice_serve.py --ckpt "$ckpt" $build --agents "${FP8_AGENTS:-60}" \
        --load "${FP8_LOAD:-600}" --rate 100 --turns 1 --server-args "--fp8-matmuls true ${SERVER_ARGS:-}" \
        --out-dir "$OUT/fp8" --name fp8_probe >> "$log" 2>&1 &
    probe=$!
    i=0
    while kill -0 $probe 2>/dev/null; do
        sleep 3; i=$((i + 1))
        for pid in $(pgrep -f spawn_main); do
            { echo "=== dump $i at $((SECONDS - start)) s, pid $pid"; /tmp/site/bin/py-spy dump --pid "$pid" 2>&1; } \
                >> "$OUT/fp8/pyspy.txt"
        done
    done
    wait $probe; echo "fp8 probe: rc $? at $((SECONDS - start)) s" | tee -a "$log"
    grep -E '^(agents|load) |no sign of life|Traceback' "$log" | tail -8
fi
if [ "${GEMM:-0}" = 1 ]; then
    timeout "${GEMM_S:-240}" python3 bench/omnivoice_gemm.py --out-dir "$OUT" ${GEMM_ARGS:-} >> "$log" 2>&1
    echo "gemm: rc $? at $((SECONDS - start)) s" | tee -a "$log"
fi
if [ "${STEPLOOP:-0}" = 1 ]; then
    for tree in ${STEPLOOP_BEFORE:+"$STEPLOOP_BEFORE"} "$PWD"; do
        label=$([ "$tree" = "$PWD" ] && echo "this tree" || echo "before: $tree")
        (cd "$tree" && git log --oneline -1 2>/dev/null) >> "$log"
        PYTHONPATH="$tree:/tmp/site" timeout "${STEPLOOP_S:-200}" python3 bench/omnivoice_steploop.py --ckpt "$ckpt" \
            --items "${STEPLOOP_ITEMS:-8,32,64,128}" --label "$label" --out-dir "$OUT" ${STEPLOOP_ARGS:-} >> "$log" 2>&1
        echo "steploop $label: rc $? at $((SECONDS - start)) s" | tee -a "$log"
    done
    grep -E '^\| [0-9]' "$OUT/omnivoice_steploop.md" 2>/dev/null
fi
if [ "${CODEC:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
    # the serving checkpoint when an earlier stage built it; else one of its own (SERVE builds $ckpt with its
    # word tokenizer: a checkpoint built here first would take its place)
    cdir=$ckpt; [ -f "$ckpt/audio_tokenizer/config.json" ] || cdir=/tmp/omnivoice-codec
    build=$([ -f "$cdir/audio_tokenizer/config.json" ] || echo "--build")
    timeout "${CODEC_S:-240}" python3 bench/omnivoice_codec.py --ckpt "$cdir" $build --jobs "${CODEC_JOBS:-1,4,16,64}" \
        --out-dir "$OUT" ${CODEC_ARGS:-} >> "$log" 2>&1
    echo "codec: rc $? at $((SECONDS - start)) s" | tee -a "$log"
    grep -E '^\| (per_length|batched)' "$OUT/omnivoice_codec_h200.md" 2>/dev/null
fi
if [ "${BULK:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
    budget=${BULK_S:-200}
    [ "$budget" -gt "$(( $(left) - 30 ))" ] && budget=$(( $(left) - 30 ))
    # SM clock and power every 200 ms beside the bench: a sustained GEMM load may run below the boost clock
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 200 \
        > "$OUT/smi_bulk.csv" 2>/dev/null & smi=$!
    [ -n "${BULK_B_ARGS:-}" ] && budget=$(( budget / 2 ))
    timeout $((budget + 30)) python3 bench/omnivoice_bench.py --ckpt "$ckpt" --out-dir "$OUT" --budget-s "$budget" \
        ${BULK_ARGS:-} >> "$log" 2>&1
    echo "bulk: rc $? at $((SECONDS - start)) s" | tee -a "$log"
    cat "$OUT/omnivoice_bench.md" 2>/dev/null | grep -E '^\| (ours|reference)|^Single'
    if [ -n "${BULK_B_ARGS:-}" ]; then  # A/B: the same bench again with other flags, results under $OUT/b
        mkdir -p "$OUT/b"
        timeout $((budget + 30)) python3 bench/omnivoice_bench.py --ckpt "$ckpt" --out-dir "$OUT/b" \
            --budget-s "$budget" $BULK_B_ARGS >> "$log" 2>&1
        echo "bulk b: rc $? at $((SECONDS - start)) s" | tee -a "$log"
        cat "$OUT/b/omnivoice_bench.md" 2>/dev/null | grep -E '^\| (ours|reference)|^Single'
    fi
    kill $smi 2>/dev/null
fi
serve() {  # serve NAME SERVER_ARGS SECONDS
    # SIGINT on timeout: the bench's finally stops its server.
    build=$([ -f "$ckpt/model.safetensors" ] || echo "--build full --word-tokenizer")
    timeout -s INT "$3" python3 bench/omnivoice_serve.py --ckpt "$ckpt" $build \
        --agents "${AGENTS:-1,25,50,100}" --load "${LOAD:-1000}" --rate "${RATE:-100}" ${SERVE_BENCH_ARGS:-} \
        ${2:+--server-args "$2"} --out-dir "$OUT" --name "$1" >> "$log" 2>&1
    echo "serve $1: rc $? at $((SECONDS - start)) s" | tee -a "$log"
}
if [ "${SERVE:-0}" = 1 ] && [ "$(left)" -gt 90 ]; then
    name=${SERVE_NAME:-omnivoice_serve_h200}
    if [ -n "${SERVE_B_ARGS:-}" ]; then  # A/B: the same runs again with other server flags
        serve "$name" "${SERVER_ARGS:-}" $(( ($(left) - 20) / 2 ))
        serve "${name}_b" "$SERVE_B_ARGS" $(( $(left) - 10 ))
    else
        serve "$name" "${SERVER_ARGS:-}" $(( $(left) - 10 ))
    fi
    grep -E '^(agents|load|server healthy|built) |serving graph buckets' "$log"
fi
if [ "${CONTINUITY:-0}" = 1 ] && [ "$(left)" -gt 90 ]; then
    timeout -s INT $(( $(left) - 10 )) python3 bench/omnivoice_continuity.py --ckpt "$ckpt" --build full \
        --word-tokenizer --agents "${CONT_AGENTS:-1,25,100}" --bulk "${CONT_BULK:-64}" ${SERVER_ARGS:+--server-args "$SERVER_ARGS"} \
        --out-dir "$OUT" >> "$log" 2>&1
    echo "continuity: rc $? at $((SECONDS - start)) s" | tee -a "$log"
    grep -E '^\| 20' "$OUT/omnivoice_continuity.md" 2>/dev/null | head -4
fi
