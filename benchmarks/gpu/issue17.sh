#!/usr/bin/env bash
# Issue 17's check on the lent GPU (run there from the repo root, after install.sh):
#   start   - writes the 7B-shaped dummy model, then runs `batch` in its own process session
#             (it outlives the call, so no trial is cut at a call's 10-minute limit) and waits
#             as `wait` does;
#   wait    - waits until the batch is done or $LIMIT seconds (default 560) passed, then copies
#             what it has so far to $OUT; call it again, right away, until it says "done";
#   batch   - in order, writing under /tmp/i17:
#             1. sweetspot tune --backend vllm over max-num-seqs {32,128,1024} x prefix caching
#                {on,off} at --rate auto (65 % of the default's capacity), one confirmation pair
#                beside the first;
#             2. benchmarks/gpu/steady_check.py: the study's capacity run against a closed
#                loop $LOOP_TIMES (default 1.5) times as long on the same server, max-num-seqs
#                $MNS (default 1024,128; STEADY_LIMIT may cut the second short).
# Workload: chat-brief.json. Results under $OUT (at most 8 files come back: the report and the
# servers' logs travel as tarballs).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/gpu-site:$PWD/src VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
D=/tmp/i17
M=/tmp/qwen2.5-7b-dummy
W=benchmarks/gpu/chat-brief.json
LOGS="$D/batch.log $D/tune.txt"
source benchmarks/gpu/background.sh
mkdir -p "$OUT" "$D"

batch() {
    G=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
    echo "== tune $(date -u +%T) on $G"
    timeout -s INT "${TUNE_LIMIT:-1300}" python3 -m sweetspot.cli tune --backend vllm \
        --dummy-weights --vllm-python python3 --model "$M/model" --tokenizer "$M/tokenizer" \
        --gpu "$G" --workload "$W" --rate auto --num-requests 200 \
        --fix max_model_len=4096 --space max_num_seqs=32,128,1024 \
        --space enable_prefix_caching=true,false --space speculative= \
        --space max_num_batched_tokens= --space gpu_memory_utilization= \
        --strategy grid --trials 7 --confirm "${CONFIRM:-1}" --server-args "--enforce-eager" \
        --storage sqlite:///$D/studies.db --study-name i17 --report-dir $D/report \
        --trials-dir $D/trials > $D/tune.txt 2>&1
    echo "== tune exit $? $(date -u +%T)"
    echo "== steady $(date -u +%T)"
    timeout -s INT "${STEADY_LIMIT:-480}" python3 benchmarks/gpu/steady_check.py \
        --model "$M/model" --tokenizer "$M/tokenizer" --gpu "$G" --vllm-python python3 \
        --workload "$W" --num-requests 200 --mns "${MNS:-1024,128}" \
        --loop-times "${LOOP_TIMES:-1.5}" \
        --server-args "--enforce-eager --max-model-len 4096" --out $D/steady
    echo "== steady exit $? $(date -u +%T)"
}

collect() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
    cp $D/batch.log $D/tune.txt "$OUT/" 2>/dev/null
    [ -f $D/studies.db ] && cp $D/studies.db "$OUT/"
    [ -f $D/steady/steady_check.json ] && cp $D/steady/steady_check.json "$OUT/"
    [ -d $D/report ] && tar czf "$OUT/report.tgz" -C $D report
    [ -d $D/trials ] && tar czf "$OUT/trial-logs.tgz" -C $D trials
    [ -d $D/steady/trials ] && tar czf "$OUT/steady-logs.tgz" -C $D/steady trials
    ls -la "$OUT"
}

case "${1:-}" in
  start)
    [ -f "$M/model/config.json" ] || python3 -m sweetspot.cli testing make-model "$M" \
        --layers 28 --hidden 3584 --heads 28 --kv-heads 4 --intermediate 18944 \
        --vocab 152064 --max-position 32768 --no-tie-embeddings > /dev/null
    start_batch ;;
  wait) wait_batch ;;
  batch) batch ;;
  *) echo "usage: $0 start|wait"; exit 2 ;;
esac
