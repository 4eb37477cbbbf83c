#!/usr/bin/env bash
# GPU machine, repo root: install what the image lacks, build, then the suite's parts as data allows.
set -u
R=$(pwd); RUN=/root/run; mkdir -p $RUN /root/runb
exec > /root/orch.log 2>&1
T0=$SECONDS; say() { echo "[orch +$((SECONDS-T0))s $(date -u +%T)] $*"; }
say "start commit $(cat .dev/commit)"
python3 -m pip install -q --no-index --no-deps --no-compile .whl/nvtx-*.whl && say "nvtx installed"
python3 -c "import setuptools,sys; print('setuptools', setuptools.__version__); sys.exit(int(setuptools.__version__.split('.')[0])<77)" \
  || { python3 -m pip install -q --no-index --no-deps .whl/setuptools-*.whl; say "setuptools upgraded"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
which ncu nsys nvcc; python3 -c "import torch, triton, pybind11; print(torch.__version__, triton.__version__, pybind11.__version__)"
export DAWNBENCH_CUDA_ARCHS=90a
python3 benchmarks/gpu_suite.py --out /root/runb --only build --part-budget 300
say "build part ended"
python3 -c "import dawnbench_fast.kernels, dawnbench_fast.roofline, dawnbench_fast.training.train; print('imports ok')"
REST=augment,conv_group,bn_act,linear,matmul,newton_schulz,bias_act
if [ ! -f /root/airbench/cifar10/test.pt ]; then
  python3 benchmarks/gpu_suite.py --out $RUN --only ops --ops bn_act --part-budget 90
  say "ops bn_act ended"; REST=conv_group,augment,bias_act,newton_schulz,linear,matmul
fi
while [ ! -f /root/airbench/cifar10/test.pt ]; do sleep 1; done
say "data ready"
D=/root/cifar10; P=/root/airbench/airbench94_muon.py
python3 benchmarks/gpu_suite.py --out $RUN --only peer --peer $P --data-dir $D --peer-runs 3 --peer-blocks 2 --part-budget 360
say "peer ended"
ok=$(python3 -c "import json; d=json.load(open('$RUN/suite.json')); print(sum(len(b.get('ours',{}).get('runs',[])) for b in d['parts']['peer']['blocks']))" 2>/dev/null || echo 0)
if [ "$ok" = "0" ]; then
  say "no runs of ours in the peer part: the trainer part without compile"
  python3 benchmarks/gpu_suite.py --out $RUN --only trainer --data-dir $D --seeds 2 --part-budget 150 --trainer-args --no-compile
fi
python3 benchmarks/gpu_suite.py --out $RUN --only roofline --data-dir $D --part-budget 100 --ncu-kernels 3
say "roofline ended"
python3 benchmarks/gpu_suite.py --out $RUN --only ops --ops $REST --part-budget 300
say "ops ended"
touch /root/orch.done
