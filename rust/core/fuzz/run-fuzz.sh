#!/bin/sh
# Runs every cargo-fuzz target for a fixed budget (seconds, default 120) on stable
# (RUSTC_BOOTSTRAP=1), with debug assertions (overflow checks) on. Corpora stay in corpus/<target>,
# crash reproducers in artifacts/<target>; each run's last libFuzzer stats line goes to fuzz-runs.log.
set -u
cd "$(dirname "$0")"
BUDGET=${1:-120}
TARGETS=${TARGETS:-"segment_scan log_open delta_decode snapshot_decode metadata_decode replay_model"}
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/target-fuzz}
for t in $TARGETS; do
    mkdir -p "corpus/$t" "artifacts/$t"
    cargo fuzz run -O -a "$t" "corpus/$t" -- -max_total_time="$BUDGET" -max_len=4096 \
        -rss_limit_mb=1024 -print_final_stats=1 > "/tmp/fuzz-$t.log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "/tmp/fuzz-$t.log" | grep -o '[0-9]*$' | tail -1)
    echo "$(date -u +%FT%TZ) $t budget=${BUDGET}s rc=$rc executions=${runs:-?}" | tee -a fuzz-runs.log
done
