#!/bin/bash
# the host-free step: bench_recipe_step before (7dfbcf1, before the change) and after (clean clone of HEAD), the same
# benchmark file (HEAD's), the package chosen by PYTHONPATH, interleaved B A A B B A on an idle machine.
cd /work/clean5
i=0
for arm in before after after before before after; do
  i=$((i+1)); pp=/work/clean4; [ $arm = after ] && pp=/work/clean5
  echo "$(date -u +%T) $i $arm"
  PYTHONPATH=$pp DAWNBENCH_DATA=/work/shared/data/cifar10 /work/venv-clean/bin/python benchmarks/bench_recipe_step.py \
    dawnbench_fast "dawnbench_fast:progressive=" --rounds 7 --benchmark-json=/work/bench44/$i-$arm.json \
    > /work/bench44/$i-$arm.log 2>&1
  echo "$(date -u +%T) $i $arm rc=$?"
done
