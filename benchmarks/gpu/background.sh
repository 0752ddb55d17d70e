# Sourced by issue17.sh and issue22.sh (from the repo root): their batch runs in its own process
# session, which outlives a `run` call (10 minutes at most) while the machine is held, and each
# call waits for it and copies what there is to $OUT. The script sets D (its work folder),
# LOGS (the files whose tails a call shows) and a `collect` function, and has a `batch` verb.

wait_batch() {
    local end=$((SECONDS + ${LIMIT:-560}))
    while [ ! -f "$D/done" ] && [ $SECONDS -lt $end ]; do sleep 5; done
    tail -n 30 $LOGS 2> /dev/null
    collect
    [ -f "$D/done" ] && echo "done" || echo "still running: call '$0 wait' again"
}

start_batch() {
    rm -f "$D/done"
    setsid nohup bash -c "'$0' batch > $D/batch.log 2>&1; touch $D/done" < /dev/null \
        > /dev/null 2>&1 &
    wait_batch
}
