"""measures/step_margins.py: elements within k honest roundings of their step, per precision pair."""

import torch

from measures.step_margins import step_margins


class _Compare(torch.nn.Module):
    """A comparison at 0 of a linear layer's output (rounded differently in float32 and float64), and one of relu
    values whose zeros sit exactly on the step in both."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.lin(x) > 0).float().sum(1) + torch.relu(x).gt(0).float().mean()


def test_near_counts_grow_with_k_and_exact_zeros_on_a_step_are_not_near():
    torch.manual_seed(0)
    model, x = _Compare(), torch.randn(8192, 64)
    got = step_margins(model, (x,))
    assert got["calls"] == 2 and got["elements"] == 2 * 8192 * 64
    near = [got["near"][k] for k in ("1", "4", "16", "64")]
    assert near == sorted(near) and near[-1] > 0
    assert model.lin.weight.dtype == torch.float32  # the model is cast back

    relu_only = torch.nn.Sequential(torch.nn.ReLU())
    zeros = step_margins(_Gt(relu_only), (x,))
    assert zeros["calls"] == 1 and zeros["near"]["64"] == 0  # relu's zeros against 0: no rounding moves them


class _Gt(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).gt(0)


def test_an_ordering_reads_the_gaps_between_neighbours():
    torch.manual_seed(0)
    x = torch.randn(256, 1024)

    class Argmax(torch.nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return torch.argmax(t * 3.0 + 1.0, dim=1)
    got = step_margins(Argmax(), (x,))
    assert got["calls"] == 1 and got["elements"] == 256 * 1023
