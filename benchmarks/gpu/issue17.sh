#!/usr/bin/env bash
# Issue 17's check on the lent GPU (run there from the repo root, after install.sh):
#   steady  - benchmarks/gpu/steady_check.py: the study's capacity run against a long closed
#             loop of the same server, max-num-seqs $MNS (default 128,1024), prefix caching on;
#   tune    - sweetspot tune --backend vllm over max-num-seqs {32,128,1024} x prefix caching
#             {on,off} at --rate auto (65 % of the default's capacity), confirmation 2 pairs;
#   resume  - the same study continued (a call that ran out of time loses only its trial).
# A dummy-weight model shaped like Qwen2.5-7B; results under $OUT (at most 8 files come back:
# the report and the servers' logs travel as tarballs).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/gpu-site:$PWD/src VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" /tmp/study
M=/tmp/qwen2.5-7b-dummy
[ -f "$M/model/config.json" ] || python3 -m sweetspot.cli testing make-model "$M" \
    --layers 28 --hidden 3584 --heads 28 --kv-heads 4 --intermediate 18944 --vocab 152064 \
    --max-position 32768 --no-tie-embeddings > /dev/null
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
W=benchmarks/gpu/chat-short.json
STUDY=(--storage sqlite:////tmp/study/studies.db --study-name i17
       --report-dir /tmp/study/report --trials-dir /tmp/study/trials)
case "${1:-}" in
  steady)
    timeout -s INT "${LIMIT:-540}" python3 benchmarks/gpu/steady_check.py --model "$M/model" \
        --tokenizer "$M/tokenizer" --gpu "$G" --vllm-python python3 --workload "$W" \
        --num-requests 200 --mns "${MNS:-128,1024}" --turnovers "${TURNOVERS:-6}" \
        --server-args "--enforce-eager --max-model-len 4096" --out /tmp/steady
    cp /tmp/steady/steady_check.json "$OUT/" ;;
  tune)
    timeout -s INT "${LIMIT:-540}" python3 -m sweetspot.cli tune --backend vllm \
        --dummy-weights --vllm-python python3 --model "$M/model" --tokenizer "$M/tokenizer" \
        --gpu "$G" --workload "$W" --rate auto --num-requests 200 \
        --fix max_model_len=4096 --space max_num_seqs=32,128,1024 \
        --space enable_prefix_caching=true,false --space speculative= \
        --space max_num_batched_tokens= --space gpu_memory_utilization= \
        --strategy grid --trials 7 --confirm 2 --server-args "--enforce-eager" "${STUDY[@]}" \
        2>&1 | tee "$OUT/tune.txt" ;;
  resume)
    timeout -s INT "${LIMIT:-540}" python3 -m sweetspot.cli tune --resume "${STUDY[@]}" \
        2>&1 | tee "$OUT/resume.txt" ;;
  *) echo "usage: $0 steady|tune|resume"; exit 2 ;;
esac
[ -f /tmp/study/studies.db ] && cp /tmp/study/studies.db "$OUT/"
[ -d /tmp/study/report ] && tar czf "$OUT/report.tgz" -C /tmp/study report
[ -d /tmp/study/trials ] && tar czf "$OUT/trial-logs.tgz" -C /tmp/study trials
[ -d /tmp/steady/trials ] && tar czf "$OUT/steady-logs.tgz" -C /tmp/steady trials
ls -la "$OUT"
