"""Results whose sizes the data chooses (op-set 7): ``nonzero(as_tuple=True)``,
``unique_consecutive``, ``unique`` with inverse indices, counts or a dimension. Each is
traced, right on other shapes and values, saved and loaded, run by both runtimes; a crafted
file's bad arguments are refused at load (ArtifactError) or before the kernel (OpError),
and the bytes of their results are bounded before the kernel runs."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch

import tracebridge
from tracebridge.runtime import checked_selections as sel

RUNTIMES = ("codegen", "interpreter")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _mask(*shape):
    return torch.randn(*shape) > 0


def _labels(*shape, high=3):
    return torch.randint(0, high, shape)


CASES = {
    "nonzero_as_tuple": (lambda x: torch.nonzero(x, as_tuple=True), _mask, [(4, 3), (7, 5)]),
    "method_as_tuple": (lambda x: x.nonzero(as_tuple=True), _mask, [(2, 3, 4), (3, 1, 5)]),
    "as_tuple_1d": (lambda x: torch.nonzero(x > 0, as_tuple=True)[0] * 2, torch.randn, [(9,)]),
    "as_tuple_0d": (
        lambda x: torch.nonzero(x, as_tuple=True),
        lambda *_: torch.randint(0, 2, ()),  # a 0-d input counts as 1-d
        [(), (), ()],
    ),
    "index_by_as_tuple": (
        lambda x: x[torch.nonzero(x > 0, as_tuple=True)],
        torch.randn,
        [(3, 4), (6, 2)],
    ),
    "as_tuple_out_none": (
        lambda x: torch.nonzero(x, as_tuple=True, out=None),
        _mask,
        [(4, 3), (2, 5)],
    ),
    "as_tuple_false": (lambda x: torch.nonzero(x, as_tuple=False), _mask, [(4, 3), (6, 2)]),
    "where_one_argument": (lambda x: torch.where(x), _mask, [(4, 3), (5, 6)]),
    "unique_consecutive": (lambda x: torch.unique_consecutive(x), _labels, [(12,), (30,)]),
    "unique_consecutive_all": (
        lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
        _labels,
        [(12,), (40,)],
    ),
    "unique_consecutive_dim": (
        lambda x: torch.unique_consecutive(x, return_counts=True, dim=0),
        lambda *s: _labels(*s, high=2),
        [(10, 2), (25, 2)],
    ),
    "tensor_unique_consecutive": (
        lambda x: x.unique_consecutive(return_inverse=True),
        _labels,
        [(8, 3), (11, 4)],
    ),
    "unique_inverse_counts": (
        lambda x: torch.unique(x, return_inverse=True, return_counts=True),
        lambda *s: _labels(*s, high=6),
        [(20,), (63,)],
    ),
    "unique_dim": (
        lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True),
        lambda *s: _labels(*s, high=2),
        [(12, 2), (30, 2)],
    ),
    "tensor_unique": (lambda x: x.unique(sorted=True, return_counts=True), _labels, [(15,), (4,)]),
}


def _same(got, expected) -> bool:
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    return len(got) == len(expected) and all(
        a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(got, expected)
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_data_chosen_results_are_right_on_other_shapes_in_both_runtimes(case, tmp_path):
    fn, make, shapes = CASES[case]
    torch.manual_seed(0)
    example = make(*shapes[0])
    traced = tracebridge.trace(fn, (example,))
    path = tmp_path / f"{case}.tb"
    traced.save(path)
    runs = [traced] + [tracebridge.load(path, runtime=rt) for rt in RUNTIMES]
    for shape in shapes + shapes[::-1]:
        x = make(*shape)
        for run in runs:
            assert _same(run(x), fn(x)), (case, shape)


def test_as_tuple_is_recorded_as_nonzero_then_one_select_per_dimension():
    traced = tracebridge.trace(lambda x: torch.nonzero(x, as_tuple=True), (_mask(3, 4, 5),))
    ops = [n.op for n in traced.program.methods["forward"].nodes]
    assert ops.count("nonzero") == 1 and ops.count("select") == 3


def test_a_keyword_the_op_set_cannot_name_is_refused_at_the_traced_line():
    """A trace that could not be saved is never made: the keyword is refused where it was
    passed (``nonzero(as_tuple=True)`` was traced, then refused at save)."""
    from tracebridge.trace.dispatch import _known_keywords

    with pytest.raises(tracebridge.UnsupportedOpError, match="with the keyword 'as_tuple'"):
        _known_keywords("nonzero", {"as_tuple": True}, "model.py:3")
    _known_keywords("nonzero", {"input": 1}, "model.py:3")  # a keyword it has


def test_out_none_is_the_default_and_out_a_tensor_is_refused_at_its_line(tmp_path):
    """``out=None`` asks for nothing (recorded without it); ``out=t`` of another shape,
    which eager resizes, is refused where it is written, not at save."""

    def fine(x):
        return torch.nonzero(x > 0, out=None), torch.sum(x, 0, out=None)

    traced = tracebridge.trace(fine, (torch.randn(3, 2),))
    traced.save(tmp_path / "fine.tb")
    x = torch.randn(5, 2)
    assert _same(tracebridge.load(tmp_path / "fine.tb")(x), fine(x))

    def into(x):
        buffer = torch.empty(0)  # eager resizes it: no copy does that (review 9: a buffer
        return torch.add(x, 1, out=buffer)  # of the result's shape is written)

    with pytest.raises(
        tracebridge.UnsupportedOpError, match=r"cannot record add at .*:\d+ with the keyword 'out'"
    ):
        tracebridge.trace(into, (torch.randn(3, 2),))


def test_factory_keywords_given_their_defaults_are_the_call_without_them(tmp_path):
    """``torch.zeros(n, requires_grad=False)`` (what R's factories passed too) asks for
    what the op does anyway: recorded without the keyword, so the trace saves; a
    ``requires_grad=True`` factory is refused at its line."""

    def fine(x):
        pad = torch.zeros(x.shape[0], requires_grad=False, pin_memory=False)
        return x + pad + torch.ones(x.shape[0], layout=torch.strided)

    traced = tracebridge.trace(fine, (torch.randn(3),))
    traced.save(tmp_path / "fine.tb")
    x = torch.randn(5)
    assert _same(tracebridge.load(tmp_path / "fine.tb")(x), fine(x))
    with pytest.raises(tracebridge.UnsupportedOpError, match="keyword 'requires_grad'"):
        tracebridge.trace(lambda x: x * torch.ones(3, requires_grad=True), (torch.randn(3),))


# --- crafted files ----------------------------------------------------------------------------


def _edited(tmp_path, fn, example, edit):
    """``fn`` traced on ``example`` and saved, with ``edit(node)`` applied to each node of
    its forward graph in the file."""
    path = tmp_path / "crafted.tb"
    tracebridge.trace(fn, (example,)).save(path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        tensors = archive.read("tensors.safetensors")
    for node in doc["methods"]["forward"]["nodes"]:
        edit(node)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", tensors)
    return path


def _set(op, position=None, key=None, value=None):
    def edit(node):
        if node["op"] == op:
            if key is not None:
                node["kwargs"][key] = value
            else:
                node["args"][position] = value

    return edit


@pytest.mark.parametrize(
    "fn, example, edit, words",
    [
        (
            lambda x: torch.nonzero(x),
            _mask(3),
            _set("nonzero", key="as_tuple", value=True),
            "nonzero takes no keyword 'as_tuple'",
        ),
        (
            lambda x: torch.unique_consecutive(x, return_counts=True),
            _labels(5),
            _set("unique_consecutive", key="return_counts", value="yes"),
            "keyword 'return_counts' of unique_consecutive must be bool",
        ),
        (
            lambda x: torch.unique_consecutive(x, dim=0),
            _labels(5, 2),
            _set("unique_consecutive", key="dim", value=1.5),
            "keyword 'dim' of unique_consecutive must be",
        ),
        (
            lambda x: torch.unique(x, return_inverse=True),
            _labels(5),
            _set("_unique2", key="sorted", value=[1]),
            "keyword 'sorted' of _unique2 must be bool",
        ),
        (
            lambda x: torch.unique(x, dim=0),
            _labels(5, 2),
            _set("unique_dim", key="dim", value="0"),
            "keyword 'dim' of unique_dim must be",
        ),
    ],
)
def test_crafted_arguments_are_refused_at_load(fn, example, edit, words, tmp_path):
    path = _edited(tmp_path, fn, example, edit)
    with pytest.raises(tracebridge.ArtifactError, match=words):
        tracebridge.load(path)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_crafted_dimension_out_of_range_is_refused_before_the_kernel(runtime, tmp_path):
    path = _edited(
        tmp_path,
        lambda x: torch.unique_consecutive(x, dim=0),
        _labels(5, 2),
        _set("unique_consecutive", key="dim", value=7),
    )
    with pytest.raises(tracebridge.OpError, match=r"dim must be an int in \[-2, 2\)"):
        tracebridge.load(path, runtime=runtime)(_labels(5, 2))


@pytest.mark.parametrize(
    "call, words",
    [
        # 2**27 x 2 true elements of an expanded view: 2**28 rows of 2 int64 indices (4 GiB)
        (lambda: sel.nonzero(torch.ones(1, 1, dtype=torch.bool).expand(2**27, 2)), "nonzero"),
        (lambda: sel.argwhere(torch.ones(1, 1, dtype=torch.bool).expand(2**27, 2)), "argwhere"),
        (
            lambda: sel.unique_consecutive(
                torch.zeros(1, dtype=torch.bool).expand(2**28), return_inverse=True
            ),
            "unique_consecutive",
        ),
        (
            lambda: sel.unique2(torch.zeros(1, dtype=torch.bool).expand(2**28), True, True),
            "_unique2",
        ),
    ],
)
def test_results_sized_by_the_data_are_bounded_before_the_kernel(call, words):
    with pytest.raises(sel.CheckFailed, match=f"{words} would allocate .* bytes, more than"):
        call()


def test_a_large_mask_with_few_true_elements_still_runs():
    """The worst case passes the limit, the real count does not: it runs."""
    mask = torch.zeros(1, 1, dtype=torch.bool).expand(2**27, 2).clone()
    mask[5, 1] = True
    assert sel.nonzero(mask).tolist() == [[5, 1]]


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: sel.nonzero([1, 0]), "nonzero: input must be a tensor"),
        (lambda: sel.unique2(_labels(4), 1, False, False), "sorted must be True or False"),
        (
            lambda: sel.unique_dim(_labels(4, 2), 2),
            r"unique_dim: dim must be an int in \[-2, 2\)",
        ),
        (
            lambda: sel.unique_consecutive(_labels(4), return_counts=None),
            "return_counts must be True or False",
        ),
    ],
)
def test_the_checked_forms_refuse_bad_arguments(call, words):
    with pytest.raises(sel.CheckFailed, match=words):
        call()


def test_the_checked_forms_give_the_kernels_results():
    x = _labels(6, 3)
    assert torch.equal(sel.nonzero(x), torch.nonzero(x))
    assert torch.equal(sel.argwhere(x), torch.argwhere(x))
    for got, want in zip(sel.unique2(x, True, True, True), torch._unique2(x, True, True, True)):
        assert torch.equal(got, want)
    for got, want in zip(
        sel.unique_consecutive(x, True, True, 0),
        torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=0),
    ):
        assert torch.equal(got, want)
