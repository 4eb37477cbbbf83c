#!/bin/bash
# The pair form of the before-pool data gradient against its FMA form (and oneDNN's dense one):
# one call at batch 1536, then the training step at 32 px, arms alternating by run.
set -e
OUT=${1:?OUT folder}
export DAWNBENCH_DATA=${DAWNBENCH_DATA:-../shared/data/cifar10}
python -m pytest benchmarks/bench_conv_shapes.py -k dgrad_pooled --benchmark-only -q -p no:cacheprovider \
  --benchmark-json="$OUT/ops.json" > "$OUT/ops.log" 2>&1
for order in 1 2 3; do
  if [ $((order % 2)) = 1 ]; then arms="dawnbench_fast_cpu:dgrad=pooled-fma,progressive= dawnbench_fast_cpu:progressive="
  else arms="dawnbench_fast_cpu:progressive= dawnbench_fast_cpu:dgrad=pooled-fma,progressive="; fi
  python benchmarks/bench_recipe_step.py $arms --rounds 5 "--benchmark-json=$OUT/step-$order.json" \
    > "$OUT/step-$order.log" 2>&1
done
