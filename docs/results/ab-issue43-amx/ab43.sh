#!/bin/bash
# the 2026 record's levers as the default against the default before, the same code (clean clone of 7dfbcf1), interleaved
# on an idle machine: A = --recipe dawnbench_fast_2025 (the 8.5-epoch default before), B = the default.
cd /work/clean4
PY=/work/venv-clean/bin/python
out=/work/ab43/runs
mkdir -p $out
one() {  # arm seed
  arm=$1; seed=$2; extra=()
  [ "$arm" = before ] && extra=(--recipe dawnbench_fast_2025)
  echo "$(date -u +%T) start $arm seed $seed"
  $PY -m dawnbench_fast.cifar --no-progress --data-dir /work/shared/data/cifar10 "${extra[@]}" --seed $seed --out $out/$arm-s$seed > $out/$arm-s$seed.log 2>&1
  echo "$(date -u +%T) end $arm seed $seed rc=$? $(grep -m1 'final top-1' $out/$arm-s$seed.log)"
}
one before 0; one new 0
one new 1; one before 1
