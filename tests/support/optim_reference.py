"""The optimisers as they stepped before their learning rates became tensors:
torch.optim.SGD, and Muon's per-parameter loop with Python-float
rates and a host-side renormalisation count. tests/optim/test_updates.py
holds the new tensor step to these, bit for bit on the CPU."""

from __future__ import annotations

import torch

from dawnbench_fast.newton_schulz import newton_schulz
from dawnbench_fast.optim.muon import norm_period


class LoopMuon(torch.optim.Optimizer):
    """Muon as it was: one Python iteration per filter bank, float lr."""

    def __init__(self, params, lr, momentum, ns_steps=3, weight_decay=0.0, norm_every=1, norm_ramp=0,
                 total_steps=1):
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps, weight_decay=weight_decay,
                                      norm_every=norm_every, norm_ramp=norm_ramp, total_steps=total_steps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, mom = group["lr"], group["momentum"]
            for p in group["params"]:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.mul_(mom).add_(p.grad)
                g = p.grad.add(buf, alpha=mom)
                state["step"] = step = state.get("step", 0) + 1
                last = state.setdefault("last_norm", 0)
                if step - last >= norm_period(step, group["norm_every"], group["norm_ramp"],
                                              group["total_steps"]):
                    state["last_norm"] = step
                    p.mul_(len(p) ** 0.5 / p.norm())
                update = newton_schulz(g.reshape(len(g), -1), group["ns_steps"])
                p.add_(update.view(g.shape).to(p.dtype), alpha=-lr)
                if group["weight_decay"]:
                    p.mul_(1.0 - lr * group["weight_decay"])
