"""The drop-in triangle multiplicative updates: an OpenFold-named state dict loads, and the
update matches a module written here from the AlphaFold 2 equations, evaluated in float64."""
from __future__ import annotations

import math

import pytest

from tests.support.skips import require

torch = require("torch")
from torch import nn  # noqa: E402

from autotune.torch import (TriangleMultiplicationIncoming,  # noqa: E402
                            TriangleMultiplicationOutgoing)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")
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


def random_state(c_z: int, seed: int) -> dict:
    """An OpenFold-named state dict in float64: nn.Linear weights [out, in], non-zero biases."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name in sorted(OPENFOLD_NAMES):
        module, kind = name.split(".")
        if module.startswith("layer_norm"):
            shape, scale, shift = (c_z,), 0.1, 1.0 if kind == "weight" else 0.0
        else:
            shape = (c_z, c_z) if kind == "weight" else (c_z,)
            scale, shift = (1 / math.sqrt(c_z) if kind == "weight" else 0.1), 0.0
        state[name] = torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift
    return state


def rel_err(got, want) -> float:
    return float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))


@pytest.fixture(autouse=True)
def private_db(fast_tmp, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(fast_tmp / "p.sqlite"))


@pytest.mark.parametrize("cls,outgoing", [(TriangleMultiplicationOutgoing, True),
                                          (TriangleMultiplicationIncoming, False)])
def test_openfold_state_dict_loads_and_matches_the_equations(cls, outgoing):
    c, n = 8, 12
    layer = cls(c, c)
    assert set(layer.state_dict()) == OPENFOLD_NAMES
    ref = AlphaFoldUpdate(c, c, outgoing).double()
    state = random_state(c, seed=1)
    layer.load_state_dict(state)
    ref.load_state_dict(state)
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(n, n, c, generator=gen, dtype=torch.float64)
    mask = (torch.rand(n, n, generator=gen) < 0.9).double()
    with torch.no_grad():
        want = ref(z, mask)
        got = layer(z.float(), mask.float())
    assert got.dtype == torch.float32 and got.shape == (n, n, c)
    assert rel_err(got, want) < 1e-4
    # the other edge direction is a different function: the check can tell them apart
    other = AlphaFoldUpdate(c, c, not outgoing).double()
    other.load_state_dict(state)
    with torch.no_grad():
        assert rel_err(got, other(z, mask)) > 1e-2
    # new weights: bound again at the next call
    state2 = random_state(c, seed=3)
    layer.load_state_dict(state2)
    ref.load_state_dict(state2)
    with torch.no_grad():
        assert rel_err(layer(z.float(), mask.float()), ref(z, mask)) < 1e-4


def test_batch_dims_and_default_mask():
    c, n = 8, 10
    layer = TriangleMultiplicationOutgoing(c, c)
    ref = AlphaFoldUpdate(c, c, True).double()
    state = random_state(c, seed=4)
    layer.load_state_dict(state)
    ref.load_state_dict(state)
    z = torch.randn(2, n, n, c, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        got = layer(z.float())
        want = ref(z, torch.ones(2, n, n, dtype=torch.float64))
    assert got.shape == (2, n, n, c) and rel_err(got, want) < 1e-4


def test_under_torch_compile():
    c, n = 8, 12
    layer = TriangleMultiplicationIncoming(c, c)
    layer.load_state_dict(random_state(c, seed=6))
    z = torch.randn(n, n, c, generator=torch.Generator().manual_seed(7))
    mask = torch.ones(n, n)
    with torch.no_grad():
        eager = layer(z, mask)
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)(z, mask)
    torch.testing.assert_close(compiled, eager)


def test_a_hidden_width_other_than_c_z_is_refused():
    with pytest.raises(ValueError, match="c_hidden=16 != c_z=8"):
        TriangleMultiplicationOutgoing(8, 16)
