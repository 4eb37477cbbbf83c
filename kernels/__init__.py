"""Triton kernels, imported as ``dawnbench_fast.kernels``, grouped by op: each
op module is the one place to start for its op (reference, kernels, custom
ops, autograd, dispatch registration, and where its CUDA and CPU faces live):

- :mod:`.augment`: the training-batch augmentation;
- :mod:`.bn_act`: batch norm + activation (statistics, finalize, affine+act,
  backward: kernels and launchers in the one module);
- :mod:`.conv_group`: conv3x3 + pool + BN statistics, weight gradient, the
  fused group's autograd (kernels in conv_group_conv3x3, conv_group_wgrad);
- :mod:`.gemm`: GEMM, alpha*A@B + beta*D, linear, matmul, Newton-Schulz
  (kernel in gemm_kernel).

Every file of an op carries its name (``ls kernels/<op>*``), its roofline
formulas included (``<op>_costs.py``); activations.py, launches.py, aot.py and
report.py serve every op.

Importing this package is cheap (no Triton); ``--kernels triton`` imports the
op modules (dispatch._PROVIDERS). ``launch_counts`` counts launches per kernel
name (tests assert on it). :mod:`.aot` / :mod:`.report` compile every kernel
for sm_80 and sm_90 without a GPU.
"""

from dawnbench_fast.kernels.launches import launch_counts

__all__ = ["launch_counts"]
