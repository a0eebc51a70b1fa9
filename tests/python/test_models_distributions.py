"""``torch.Size(...)`` built from traced sizes stays general: torch.distributions builds its
sample shapes so (``_extended_shape``: ``torch.Size(sample_shape + batch_shape)``), and
PyTorch's ``torch.Size`` reads each size in C, which fixed the batch size in the trace.
Tested with a VAE-style encoder (``Normal(...).rsample()``, ``log_prob``), in both runtimes
and after a save/load round trip, against eager at other batch sizes with the same seed.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

RUNTIMES = ("codegen", "interpreter")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class GaussianEncoder(nn.Module):
    """A VAE's encoder: a diagonal Normal, a reparameterised sample and its log density."""

    def __init__(self, samples: tuple = ()):
        super().__init__()
        self.enc = nn.Linear(4, 6)
        self.samples = samples

    def forward(self, x):
        mu, log_var = self.enc(x).chunk(2, -1)
        posterior = torch.distributions.Normal(mu, (0.5 * log_var).exp())
        z = posterior.rsample(self.samples)
        return z, posterior.log_prob(z).sum(-1)


def _same_seed(fn, x):
    torch.manual_seed(7)
    return fn(x)


@pytest.mark.parametrize("samples", [(), (2,)], ids=["one-sample", "two-samples"])
def test_distribution_samples_follow_the_batch_size(samples, tmp_path):
    module = GaussianEncoder(samples)
    traced = tracebridge.trace(module, (torch.randn(3, 4),))
    traced.save(tmp_path / "vae.tb")
    runs = [traced] + [tracebridge.load(tmp_path / "vae.tb", runtime=rt) for rt in RUNTIMES]
    for batch in (3, 5, 2, 1):
        x = torch.randn(batch, 4)
        expected = _same_seed(module, x)
        assert expected[0].shape == (*samples, batch, 3)
        for fn in runs:
            got = _same_seed(fn, x)
            assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, expected))


class SizedFactories(nn.Module):
    def forward(self, x):
        shape = torch.Size(d * 2 // 2 for d in (x.shape[0], 2))
        assert isinstance(shape, torch.Size) and isinstance(x.shape, tuple)
        return x.new_zeros(shape) + torch.ones(torch.Size((x.size(0), 1)))


def test_torch_size_of_traced_sizes_records_no_guard():
    traced = tracebridge.trace(SizedFactories(), (torch.randn(3, 4),))
    assert traced.guards == []
    for batch in (1, 6):
        assert torch.equal(traced(torch.randn(batch, 4)), torch.ones(batch, 2))


def test_torch_size_is_itself_outside_a_trace_and_checks_as_before():
    original = torch.Size
    seen = []

    def fn(x):
        seen.append(torch.Size([2, 3]))
        with pytest.raises(TypeError):
            torch.Size([x.shape[0] / 2])  # a float is no size, as in eager
        return x * 2

    tracebridge.trace(fn, (torch.randn(4),), check_trace=False)
    assert torch.Size is original
    assert type(seen[0]) is original and seen[0] == (2, 3)


def test_a_torch_size_pickles_while_a_trace_runs_in_any_thread():
    # the stand-in made pickle refuse every torch.Size in the process while a trace ran
    # ("not the same object as torch.Size"): a checkpoint writer's thread, say
    import copyreg
    import pickle
    import threading

    original = torch.Size
    kept = original([4, 1])
    found = {}

    def other_thread():
        found["other"] = pickle.loads(pickle.dumps(torch.ones(2, 3).shape))

    def fn(x):
        found["own"] = pickle.loads(pickle.dumps(kept, protocol=0))
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        return x * 2

    tracebridge.trace(fn, (torch.randn(4),), check_trace=False)
    assert type(found["own"]) is original and found["own"] == (4, 1)
    assert type(found["other"]) is original and found["other"] == (2, 3)
    assert torch.Size is original and original not in copyreg.dispatch_table
    assert b"torch" in pickle.dumps(original([1]), protocol=0)
