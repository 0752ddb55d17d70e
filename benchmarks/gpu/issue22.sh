#!/usr/bin/env bash
# Issue 22's measurements on the lent GPU (run there from the repo root, after install.sh):
#   start   - writes the Qwen3-14B-shaped dummy model, then runs `batch` in its own process
#             session (it outlives the call) and waits as `wait` does;
#   wait    - waits until the batch is done or $LIMIT seconds (default 560) passed, then copies
#             what it has so far to $OUT; call it again, right away, until it says "done";
#   batch   - two servers (QUICK=1: A's short list, then B's; QUICK=2: A's shortest) of vLLM 0.24's defaults (CUDA graphs, torch.compile, async
#             scheduling, chunked prefill, prefix caching), one run after another on each:
#             A (max-model-len 32768, utilisation 0.9):
#               1. ShareGPT-like (P7's means) 500 at rate inf on the fresh server, no warm-up:
#                  the start-up transient (item 5);
#               2. the same, 600 requests, warmed: saturated burst (items 3, 9); its own seed
#                  (on 2026-12-07 it repeated a01's prompts: 80 % prefix-cache hits);
#               3. one prompt at a time of 128 ... 24576 tokens, one output token: prefill time
#                  by chunk size and context (item 3), the front end at light load (item 4);
#               4. 256 in / 256 out in closed loops of 1, 8 and 32: small-batch decode (8, 9);
#               5. random 2000/100, 4000/200 and 128/4 at rate inf (P7's runs on 0.24);
#               6. 2000-token prompts with 0, 1000 and 1800 tokens shared: prefix caching (7);
#               7. ShareGPT-like Poisson at 8 req/s: moderate load (8, 9);
#               8. 20000 in / 200 out in a closed loop of 16: the convoy check (item 2);
#             B (an 8 GiB KV cache, ~52k tokens, on either card):
#               9. 512 in / 256 out, 600 at rate inf: KV over-subscription (item 6);
#              10. the same in a closed loop of 64 (fits the cache): the reference.
# BATCH=2 (start and batch): the second round instead: C, a Llama-3.1-8B-shaped model: the
#   20000/200 closed loop at 4 and 8 (convoy, item 2), a ShareGPT burst with its own seed, the
#   128/4 burst (the front end, item 4); D2048 and D16384, Qwen3-14B with those token budgets:
#   random 4000/200 and one 8192-token prompt (prefill by chunk size, item 3).
# BATCH=3 (start and batch): the third round: C again, bursts for the API server's intake
#   (item 4; predicted before the run, see RESULTS.md): 128/4 x150, x600 (c04 again) and x1200,
#   128/1 and 128/64 x600, 512/4 x600.
# BATCH=4 (start and batch): the fourth round (2026-12-07, predicted before the run): C again:
#   256/256 closed loops of 1, 4 and 16 and ShareGPT-like Poisson at 2 and 4 req/s (small-batch
#   decode at moderate load on an 8B shape, items 8 and 9), the 128/64 burst again (its stall
#   and its 600-sequence decode), the 20000/200 closed loop of 4 again (its second-slot TTFT).
# BATCH=5 (start and batch): the fifth round (2026-12-07): C with vLLM's per-iteration log
#   (--enable-logging-iteration-details: each engine step's prefill and decode requests and
#   tokens, and its time): the 20000/200 closed loop of 4, the 256/256 closed loop of 16, the
#   128/64 burst and a ShareGPT-like burst again, to see the steps behind P12's and P15's drift,
#   the CPU-bound 600-sequence decode and a saturated mix. The simulator's predictions are
#   P12's, P14's and P15's (same lengths; their seeds only change token ids).
# Every run: sweetspot bench --json --detailed (vLLM's keys and every request's times) under
# /tmp/i22/runs; the servers' logs beside. Results come back as one tarball.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/gpu-site:$PWD/src VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
D=/tmp/i22
M=/tmp/qwen3-14b-dummy
M8=/tmp/llama-8b-dummy
W=benchmarks/gpu/i22
PORT=8022
LOGS="$D/batch.log"
source benchmarks/gpu/background.sh
mkdir -p "$OUT" "$D/runs"

serve() {  # serve NAME OPTIONS...: start a server in the background, wait for /health
    local name=$1; shift
    echo "== server $name $(date -u +%T): $*"
    local m=${SERVE_MODEL:-$M}
    [ "$name" = C ] && m=$M8
    setsid python3 -m vllm.entrypoints.openai.api_server --model "$m/model" \
        --tokenizer "$m/tokenizer" --load-format dummy --port $PORT "$@" \
        > "$D/runs/server-$name.log" 2>&1 < /dev/null &
    SERVER=$!
    local start=$SECONDS
    until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
        if ! kill -0 $SERVER 2> /dev/null; then echo "server $name died"; tail -20 \
            "$D/runs/server-$name.log"; return 1; fi
        [ $((SECONDS - start)) -gt 600 ] && { echo "server $name: no health"; return 1; }
        sleep 2
    done
    echo "== server $name up in $((SECONDS - start)) s"
}

stop() {
    kill -INT -- -$SERVER 2> /dev/null
    for _ in $(seq 60); do kill -0 $SERVER 2> /dev/null || break; sleep 1; done
    kill -KILL -- -$SERVER 2> /dev/null
    sleep 3
}

bench() {  # bench NAME WORKLOAD N [options]: one run on the server, its JSON under runs/
    local name=$1 workload=$2 n=$3; shift 3
    echo "== $name $(date -u +%T)"
    timeout -s INT 300 python3 -m sweetspot.cli bench --url "http://127.0.0.1:$PORT" \
        --workload "$W/$workload.json" --num-requests "$n" --json "$D/runs/$name.json" \
        --detailed --vocab-size 32000 "$@" 2>&1 | tail -n 4
}

quickest() {  # QUICK=2: about three minutes after the server is up
    bench a01-sharegpt-fresh sharegpt-228-202 300 --rate inf --warmup 0
    for p in 128 1024 4096 8192 16384 24576; do
        bench a03-prefill-$p prefill-$p 3 --concurrency 1 --warmup 0 --seed $p
    done
    bench a04-decode-c1 decode-256-256 3 --concurrency 1
    bench a04-decode-c8 decode-256-256 16 --concurrency 8
    bench a04-decode-c32 decode-256-256 64 --concurrency 32
    bench a08-closed-20000 closed-20000-200 32 --concurrency 16
    bench a05-random-2000-100 random-2000-100 100 --rate inf
    stop
}

quick() {  # QUICK=1: what fits about six minutes after the server is up
    bench a01-sharegpt-fresh sharegpt-228-202 300 --rate inf --warmup 0
    bench a02-sharegpt-inf sharegpt-228-202 400 --rate inf --seed 2
    for p in 128 1024 4096 8192 16384 24576; do
        bench a03-prefill-$p prefill-$p 3 --concurrency 1 --warmup 0 --seed $p
    done
    bench a04-decode-c1 decode-256-256 4 --concurrency 1
    bench a04-decode-c8 decode-256-256 24 --concurrency 8
    bench a04-decode-c32 decode-256-256 64 --concurrency 32
    bench a08-closed-20000 closed-20000-200 32 --concurrency 16
    bench a05-random-2000-100 random-2000-100 100 --rate inf
    bench a05-random-128-4 random-128-4 400 --rate inf
    bench a06-prefix-1800 prefix-1800 200 --rate inf --seed 1800
    stop
}

batch() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if [ -n "${QUICK:-}" ]; then
        serve A --max-model-len 32768 && if [ "$QUICK" = 2 ]; then quickest; else quick; fi
        if [ "$QUICK" = 1 ] && serve B --max-model-len 4096 --kv-cache-memory-bytes 8589934592
        then  # KV over-subscription (item 6), shortened: about two minutes after the start
            bench b09-oversub-inf oversub-512-256 300 --rate inf
            bench b10-oversub-c64 oversub-512-256 128 --concurrency 64
            stop
        fi
        echo "== batch done $(date -u +%T)"
        return
    fi
    if serve A --max-model-len 32768; then
        bench a01-sharegpt-fresh sharegpt-228-202 500 --rate inf --warmup 0
        bench a02-sharegpt-inf sharegpt-228-202 600 --rate inf --seed 2
        for p in 128 512 1024 2048 4096 8192 16384 24576; do
            bench a03-prefill-$p prefill-$p 4 --concurrency 1 --warmup 0 --seed $p
        done
        bench a04-decode-c1 decode-256-256 6 --concurrency 1
        bench a04-decode-c8 decode-256-256 48 --concurrency 8
        bench a04-decode-c32 decode-256-256 128 --concurrency 32
        bench a05-random-2000-100 random-2000-100 150 --rate inf
        bench a05-random-4000-200 random-4000-200 60 --rate inf
        bench a05-random-128-4 random-128-4 600 --rate inf
        bench a08-closed-20000 closed-20000-200 48 --concurrency 16
        for p in 0 1000 1800; do bench a06-prefix-$p prefix-$p 200 --rate inf --seed $p; done
        bench a07-sharegpt-poisson8 sharegpt-228-202 240 --rate 8 --seed 7
        stop
    fi
    if serve B --max-model-len 4096 --kv-cache-memory-bytes 8589934592; then
        bench b09-oversub-inf oversub-512-256 500 --rate inf
        bench b10-oversub-c64 oversub-512-256 200 --concurrency 64
        stop
    fi
    echo "== batch done $(date -u +%T)"
}

batch2() {  # BATCH=2: the second round (2026-12-07): an 8B shape and the prefill chunk size
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if serve C --max-model-len 32768; then  # M8: Llama-3.1-8B's shape
        bench c01-closed-20000-c4 closed-20000-200 24 --concurrency 4
        bench c02-closed-20000-c8 closed-20000-200 32 --concurrency 8
        bench c03-sharegpt-inf sharegpt-228-202 600 --rate inf --seed 3
        bench c04-random-128-4 random-128-4 600 --rate inf --seed 4
        stop
    fi
    for mnbt in 2048 16384; do
        if SERVE_MODEL=$M serve D$mnbt --max-model-len 32768 --max-num-batched-tokens $mnbt
        then
            bench d-$mnbt-random-4000-200 random-4000-200 60 --rate inf --seed 5
            bench d-$mnbt-prefill-8192 prefill-8192 3 --concurrency 1 --warmup 0 --seed 8192
            stop
        fi
    done
    echo "== batch done $(date -u +%T)"
}

batch3() {  # BATCH=3: bursts through the API server (2026-12-07, after the intake change)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if serve C --max-model-len 32768; then
        bench e01-128-4-x150 random-128-4 150 --rate inf --seed 11
        bench e02-128-4-x600 random-128-4 600 --rate inf --seed 12
        bench e03-128-4-x1200 random-128-4 1200 --rate inf --seed 13
        bench e04-128-1-x600 random-128-1 600 --rate inf --seed 14
        bench e05-128-64-x600 random-128-64 600 --rate inf --seed 15
        bench e06-512-4-x600 random-512-4 600 --rate inf --seed 16
        stop
    fi
    echo "== batch done $(date -u +%T)"
}

batch4() {  # BATCH=4: small-batch decode at moderate load, two runs again (2026-12-07)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if serve C --max-model-len 32768; then
        bench f01-decode-c1 decode-256-256 6 --concurrency 1 --seed 21
        bench f02-decode-c4 decode-256-256 24 --concurrency 4 --seed 22
        bench f03-decode-c16 decode-256-256 64 --concurrency 16 --seed 23
        bench f04-sharegpt-poisson2 sharegpt-228-202 120 --rate 2 --seed 24
        bench f05-sharegpt-poisson4 sharegpt-228-202 200 --rate 4 --seed 25
        bench f06-128-64-x600 random-128-64 600 --rate inf --seed 26
        bench f07-closed-20000-c4 closed-20000-200 24 --concurrency 4 --seed 27
        stop
    fi
    echo "== batch done $(date -u +%T)"
}

batch5() {  # BATCH=5: the same shape with the engine's per-iteration log (2026-12-07)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if serve C --max-model-len 32768 --enable-logging-iteration-details; then
        bench g01-closed-20000-c4 closed-20000-200 24 --concurrency 4 --seed 31
        bench g02-decode-c16 decode-256-256 64 --concurrency 16 --seed 32
        bench g03-128-64-x600 random-128-64 600 --rate inf --seed 33
        bench g04-sharegpt-inf sharegpt-228-202 600 --rate inf --seed 34
        stop
    fi
    echo "== batch done $(date -u +%T)"
}

collect() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
    cp $D/batch.log "$OUT/" 2> /dev/null
    tar czf "$OUT/runs.tgz" -C $D runs
    ls -la "$OUT"
}

case "${1:-}" in
  start)
    [ -f "$M/model/config.json" ] || python3 -m sweetspot.cli testing make-model "$M" \
        --layers 40 --hidden 5120 --heads 40 --kv-heads 8 --intermediate 17408 \
        --vocab 151936 --max-position 40960 --no-tie-embeddings > /dev/null
    [ "${BATCH:-1}" != 1 ] && { [ -f "$M8/model/config.json" ] || python3 -m sweetspot.cli \
        testing make-model "$M8" --layers 32 --hidden 4096 --heads 32 --kv-heads 8 \
        --intermediate 14336 --vocab 128256 --max-position 131072 --no-tie-embeddings \
        > /dev/null; }
    start_batch ;;
  wait) wait_batch ;;
  batch) case "${BATCH:-1}" in 2) batch2 ;; 3) batch3 ;; 4) batch4 ;; 5) batch5 ;; *) batch ;; esac ;;
  *) echo "usage: $0 start|wait"; exit 2 ;;
esac
