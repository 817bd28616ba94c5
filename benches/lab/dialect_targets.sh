#!/bin/bash
# Issue 28's targets, side by side (docs/benchmarks.md, "Dialects"). Needs the bases of
#   python benches/lab/dialect_ab.py make /work/bench/d64 10000000 64
#   python benches/lab/dialect_ab.py make /work/bench/d1k 2000000 1024
cd "$(dirname "$0")/../.."
for d in d64 d1k; do
  for what in restore verify; do
    echo "== $what $d"
    farm-bench -n 11 --vs "python benches/lab/dialect_ab.py $what /work/bench/$d-taskflux" \
      -- python benches/lab/dialect_ab.py $what /work/bench/$d 2>&1 | grep -E "(A|B) wall|A/B wall"
  done
  echo "== convert $d"
  farm-bench -n 7 --vs "sh -c 'rm -rf /work/bench/cp && cp -r /work/bench/$d /work/bench/cp && sync -f /work/bench/cp'" \
    -- python benches/lab/dialect_ab.py convert /work/bench/$d /work/bench/out 2>&1 | grep -E "(A|B) wall|A/B wall"
done
rm -rf /work/bench/cp /work/bench/out
