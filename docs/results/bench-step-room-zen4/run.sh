#!/usr/bin/env bash
# bench_recipe_step before (502b778) and after (HEAD), interleaved, default recipe arm only
set -u
export DAWNBENCH_DATA=/work/shared/data/cifar10 BENCH_ARMS=dawnbench_fast BENCH_ROUNDS=5
for i in 1 2; do
  for side in before main; do
    if [ $side = before ]; then dir=/work/wt-before; py=/work/venv-before/bin/python; else dir=/work/main; py=/work/venv/bin/python; fi
    (cd $dir && $py -m pytest -q benchmarks/bench_recipe_step.py -p no:cacheprovider --benchmark-json=/work/bench/$side-$i.json > /work/bench/$side-$i.log 2>&1)
    uptime >> /work/bench/$side-$i.log
  done
done
