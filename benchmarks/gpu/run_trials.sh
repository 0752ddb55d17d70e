#!/usr/bin/env bash
# Real sweetspot trials on the H200 (run ON the device from the repo root, after install.sh):
# a dummy-weight model shaped like Qwen2.5-7B, one `sweetspot bench --launch` trial per
# max-num-seqs value, results (JSON + server logs) under $OUT (or ./gpu-out).
#
#   MNS="16 256" N=512 PROMPT=512 OUTPUT=256 benchmarks/gpu/run_trials.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
SITE=${SITE:-/tmp/gpu-site}
OUT=${OUT:-$PWD/gpu-out}
MNS=${MNS:-"16 256"}
N=${N:-512}
PROMPT=${PROMPT:-512}
OUTPUT=${OUTPUT:-256}
PY=${PY:-python3}
export PYTHONPATH="$SITE:$PWD/src" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

# Qwen2.5-7B's shape (hardware-models.md): 28 layers, hidden 3584, 28 heads, 4 KV heads,
# MLP 18944, vocabulary 152064, untied LM head; dummy weights, WordLevel tokenizer.
MODEL=/tmp/qwen2.5-7b-dummy
[ -f "$MODEL/model/config.json" ] || "$PY" -m sweetspot.cli testing make-model "$MODEL" \
    --layers 28 --hidden 3584 --heads 28 --kv-heads 4 --intermediate 18944 --vocab 152064 \
    --max-position 32768 --no-tie-embeddings > /dev/null

cat > "$OUT/workload.json" <<JSON
{"name": "fixed-${PROMPT}-${OUTPUT}", "prompt": {"kind": "fixed", "value": $PROMPT},
 "output": {"kind": "fixed", "value": $OUTPUT}}
JSON

# Dummy weights (the model folder has none): the launcher always used them; once `bench` has
# --dummy-weights (real weights the default), they must be asked for.
DUMMY=()
bench_help=$("$PY" -m sweetspot.cli bench --help)
[[ $bench_help == *--dummy-weights* ]] && DUMMY=(--dummy-weights)

for mns in $MNS; do
    echo "== max-num-seqs $mns"
    "$PY" -m sweetspot.cli bench --launch --dummy-weights --vllm-python "$PY" \
        --workload "$OUT/workload.json" --num-requests "$N" --rate inf --seed "$mns" --trials-dir "$OUT/trials" \
        --json "$OUT/mns-$mns.json" -- "$MODEL/model" --tokenizer "$MODEL/tokenizer" \
        --max-model-len 4096 --max-num-seqs "$mns" || echo "trial exit $?"
done
ls -la "$OUT" "$OUT/trials"
