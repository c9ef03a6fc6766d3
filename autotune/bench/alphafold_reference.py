"""AlphaFold 2's triangle multiplicative updates written from the supplement's equations in plain
PyTorch, with OpenFold's parameter names: the reference that autotune.torch's drop-in modules are
checked against (tests/autotune/interop/test_trimul_module.py) and timed against
(:mod:`autotune.bench.module`, ``autotune bench --module``).  Nothing here is tuned; torch is
imported with the module, which only the module bench and the tests load."""
from __future__ import annotations

import math

import torch
from torch import nn

OPENFOLD_NAMES = {f"{m}.{p}" for m in ("layer_norm_in", "linear_a_p", "linear_a_g", "linear_b_p",
                                       "linear_b_g", "layer_norm_out", "linear_z", "linear_g")
                  for p in ("weight", "bias")}


class AlphaFoldUpdate(nn.Module):
    """Algorithms 11 (outgoing) and 12 (incoming) of the AlphaFold 2 supplement, line by line."""

    def __init__(self, c_z: int, c: int, outgoing: bool):
        super().__init__()
        self.outgoing = outgoing
        self.layer_norm_in, self.layer_norm_out = nn.LayerNorm(c_z), nn.LayerNorm(c)
        self.linear_a_p, self.linear_a_g = nn.Linear(c_z, c), nn.Linear(c_z, c)
        self.linear_b_p, self.linear_b_g = nn.Linear(c_z, c), nn.Linear(c_z, c)
        self.linear_g, self.linear_z = nn.Linear(c_z, c_z), nn.Linear(c, c_z)

    def forward(self, z, mask):
        z = self.layer_norm_in(z)                                              # line 1
        m = mask[..., None]
        a = m * torch.sigmoid(self.linear_a_g(z)) * self.linear_a_p(z)         # line 2
        b = m * torch.sigmoid(self.linear_b_g(z)) * self.linear_b_p(z)
        g = torch.sigmoid(self.linear_g(z))                                    # line 3
        if self.outgoing:   # z_ij = sum_k a_ik * b_jk
            t = torch.einsum("...ikc,...jkc->...ijc", a, b)
        else:               # z_ij = sum_k a_ki * b_kj
            t = torch.einsum("...kic,...kjc->...ijc", a, b)
        return g * self.linear_z(self.layer_norm_out(t))                       # line 4


def random_state(c_z: int, seed: int, dtype=torch.float64) -> dict:
    """An OpenFold-named state dict: nn.Linear weights [out, in] scaled by 1/sqrt(c_z),
    non-zero biases, layer-norm weights near one."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name in sorted(OPENFOLD_NAMES):
        module, kind = name.split(".")
        if module.startswith("layer_norm"):
            shape, scale, shift = (c_z,), 0.1, 1.0 if kind == "weight" else 0.0
        else:
            shape = (c_z, c_z) if kind == "weight" else (c_z,)
            scale, shift = (1 / math.sqrt(c_z) if kind == "weight" else 0.1), 0.0
        state[name] = (torch.randn(shape, generator=gen, dtype=torch.float64) * scale
                       + shift).to(dtype)
    return state


class PairBlock(nn.Module):
    """The two updates the way an AlphaFold pair stack applies them: outgoing, then incoming,
    each added to the pair representation."""

    def __init__(self, outgoing: nn.Module, incoming: nn.Module):
        super().__init__()
        self.outgoing, self.incoming = outgoing, incoming

    def forward(self, z, mask):
        z = z + self.outgoing(z, mask)
        return z + self.incoming(z, mask)
