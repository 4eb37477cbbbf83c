#!/bin/bash
# the new default's lesions, one seed each, from the clean clone at 7dfbcf1 (the default = fulcrum levers, 9.5 epochs).
# baseline-s0 is the ten-seed record's seed 0 (c878d9f, --recipe fulcrum --epochs 9.5: the same config).
cd /work/clean4
PY=/work/venv-clean/bin/python
run() {  # name, then --set fields
  name=$1; shift
  sets=(); for f in "$@"; do sets+=(--set "$f"); done
  echo "$(date -u +%T) start $name ${sets[*]}"
  $PY -m dawnbench_fast.cifar --no-progress --latency-images 0 --data-dir /work/shared/data/cifar10 "${sets[@]}" --seed 0 --out /work/les43/runs/$name-s0 > /work/les43/runs/$name-s0.log 2>&1
  rc=$?
  echo "$(date -u +%T) end $name rc=$rc $(grep -m1 'final top-1' /work/les43/runs/$name-s0.log)"
}
run recipe_progressive_mode progressive_mode=crop
run recipe_average_every average_every=0
run recipe_lr_floor_and_hold lr_floor=0.0 lr_hold_epochs=0.0
run recipe_filter_norm_ramp filter_norm_ramp=0
