#!/bin/bash
# the new default's last two lesion arms (the floor-and-hold arm resumed from its checkpoint after it was stopped).
cd /work/clean4
PY=/work/venv-clean/bin/python
common=(--no-progress --latency-images 0 --data-dir /work/shared/data/cifar10 --seed 0)
echo "$(date -u +%T) resume recipe_lr_floor_and_hold"
$PY -m dawnbench_fast.cifar "${common[@]}" --set lr_floor=0.0 --set lr_hold_epochs=0.0 --resume /work/les43/runs/recipe_lr_floor_and_hold-s0 > /work/les43/runs/recipe_lr_floor_and_hold-s0.log 2>&1
echo "$(date -u +%T) end rc=$? $(grep -m1 'final top-1' /work/les43/runs/recipe_lr_floor_and_hold-s0.log)"
echo "$(date -u +%T) start recipe_filter_norm_ramp"
$PY -m dawnbench_fast.cifar "${common[@]}" --set filter_norm_ramp=0 --out /work/les43/runs/recipe_filter_norm_ramp-s0 > /work/les43/runs/recipe_filter_norm_ramp-s0.log 2>&1
echo "$(date -u +%T) end rc=$? $(grep -m1 'final top-1' /work/les43/runs/recipe_filter_norm_ramp-s0.log)"
