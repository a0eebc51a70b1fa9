"""Checked implementations of the numeric ops added in op-set 7 whose result size is a
product of sizes or an argument, and of ``embedding_renorm_``, the one op that writes a
parameter.

Note: what is checked, and why. The linear-algebra kernels of op-set 7 check their own
arguments (pivots within the matrix, shapes that agree, ``tau`` no longer than the
reflectors: torch 2.13 refuses each with an error), and make results no larger than their
operands, so they run as they are. These do not:

* ``linalg.vander(x, N)`` makes ``x.numel() * N`` elements, ``N`` an argument;
* ``histogram(x, bins)`` makes ``bins`` counts and ``bins + 1`` edges, ``bins`` an argument;
* ``cov`` and ``corrcoef`` of ``[n, m]`` observations make ``n * n`` (a ``[2**16, 1]``
  input, 256 KiB, asks for 16 GiB);
* ``linalg.multi_dot`` makes ``rows(first) * columns(last)`` (a ``[n, 1] @ [1, n]`` chain);
* ``diagflat`` makes ``n * n`` from ``n`` elements, ``addr`` ``len(vec1) * len(vec2)``;
* ``lu_unpack`` swaps by every pivot it is given, however many (their values are checked);
* factorisations whose results are square in the input's rows or columns: ``linalg.lu``'s
  and ``lu_unpack``'s permutation ``P`` (``m x m``), ``svd(some=False)``'s and
  ``linalg.svd(full_matrices=True)``'s ``U`` and ``V`` (``m x m``, ``n x n``; the latter is
  ``linalg.svd``'s default), ``linalg.qr(mode='complete')``'s ``Q`` (``m x m``): an
  ``m x 1`` input of ``2**16`` rows (a free expanded view) asked for 16 GiB;
* the solves broadcast the batch dimensions of their two operands (``cholesky_solve``,
  ``triangular_solve``, ``linalg.solve_triangular``, ``linalg.lu_solve``), and
  ``linalg.lstsq`` makes ``columns(A) x columns(B)``: a ``[2**16, 1, 1, 1]`` and a
  ``[1, 2**16, 1, 1]`` operand (expanded views a file makes for nothing) asked for 16 GiB,
  which the load budget did not count for them (nor ``linalg.solve``, ``linalg.solve_ex``);
* ``trapezoid``, ``trapz`` and ``cumulative_trapezoid`` broadcast ``y`` against a
  sample-point tensor ``x`` of more than one dimension, the same way;
* ``fused_moving_avg_obs_fake_quant`` loops over its observer buffers through raw
  pointers, by the input's rows (an empty buffer crashed the process);
* ``linalg.eigvals`` of a float32 or complex64 matrix holding a NaN or an infinity crashed
  the process (torch 2.13: LAPACK's balancing step rejects it and ``geev`` then reads
  past its work arrays); ``linalg.eig`` refuses the same input, ``eigvals`` did not;
* ``embedding_renorm_`` writes into its weight in place: PyTorch's CPU kernel wraps a
  negative index to the rows from the end, and a negative ``max_norm`` flips the sign of
  every row it touches (eager ``nn.Embedding`` never passes either).

Each bounds its bytes before the kernel (``alloc_bytes``, as every size taken from a value
or a product of sizes), or checks what the kernel trusts, and raises ``CheckFailed``,
which the runtime turns into an ``OpError`` naming the node.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .checked_ops import CheckFailed, _bytes_ok, _is_tensor, _need

__all__ = ["CHECKED", "CheckFailed"]

_VF = torch._C._VariableFunctions


def _result_dtype(t: torch.Tensor) -> torch.dtype:
    """The widest dtype a result of these ops takes from ``t`` (integers promote to the
    default float in ``cov``; complex stays complex)."""
    return t.dtype if t.is_floating_point() or t.is_complex() else torch.float64


def vander(x, N=None):
    """``torch.linalg.vander`` after bounding its ``x.numel() * N`` elements.

    >>> vander(torch.tensor([2, 3]), N=3).tolist()
    [[1, 2, 4], [1, 3, 9]]
    """
    _need(_is_tensor(x), "linalg.vander: x must be a tensor")
    _need(
        N is None or (type(N) is int and N >= 2),
        lambda: f"linalg.vander: N must be None or an int of at least 2, not {N!r}",
    )
    columns = x.size(-1) if N is None and x.dim() else (N or 1)
    _bytes_ok("linalg.vander", x.numel() * columns, x.dtype)
    return torch._C._linalg.linalg_vander(x, N=N)


def histogram(input, bins=100, *, range=None, weight=None, density=False):
    """``torch.histogram`` after bounding its ``bins`` counts and ``bins + 1`` edges (a
    number of bins is an argument; a tensor of edges is bounded by its own size)."""
    _need(_is_tensor(input), "histogram: input must be a tensor")
    if not _is_tensor(bins):
        _need(
            type(bins) is int and bins >= 1,
            lambda: f"histogram: bins must be a positive int or a tensor of edges, not {bins!r}",
        )
        _bytes_ok("histogram", 2 * bins + 1, _result_dtype(input))
    _need(
        range is None
        or (
            isinstance(range, (list, tuple))
            and len(range) == 2
            and all(isinstance(r, (int, float)) and math.isfinite(r) for r in range)
        ),
        "histogram: range must be None or two finite numbers (min, max)",
    )
    _need(isinstance(density, bool), "histogram: density must be True or False")
    if _is_tensor(bins):  # edges given: that overload takes no range
        _need(range is None, "histogram: range is taken with a number of bins, not with edges")
        return _VF.histogram(input, bins, weight=weight, density=density)
    return _VF.histogram(input, bins, range=range, weight=weight, density=density)


def _square_of_rows(op: str, input) -> None:
    _need(
        _is_tensor(input) and input.dim() <= 2,
        lambda: f"{op}: input must be a 1-d or 2-d tensor",
    )
    rows = input.size(0) if input.dim() == 2 else 1
    _bytes_ok(op, rows * rows, _result_dtype(input))


def cov(input, *, correction=1, fweights=None, aweights=None):
    """``torch.cov`` after bounding its ``rows x rows`` result."""
    _square_of_rows("cov", input)
    _need(
        type(correction) is int,
        lambda: f"cov: correction must be an int, not {correction!r}",
    )
    return _VF.cov(input, correction=correction, fweights=fweights, aweights=aweights)


def corrcoef(input):
    """``torch.corrcoef`` after bounding its ``rows x rows`` result."""
    _square_of_rows("corrcoef", input)
    return _VF.corrcoef(input)


def multi_dot(tensors):
    """``torch.linalg.multi_dot`` after bounding its result: the rows of the first matrix
    times the columns of the last (a vector at either end counts as one)."""
    op = "linalg.multi_dot"
    _need(
        isinstance(tensors, (list, tuple)) and len(tensors) >= 2 and all(map(_is_tensor, tensors)),
        lambda: f"{op}: expects a list of at least two tensors",
    )
    first, last = tensors[0], tensors[-1]
    _need(
        first.dim() in (1, 2) and last.dim() in (1, 2),
        lambda: f"{op}: the first and last tensors must be 1-d or 2-d",
    )
    rows = first.size(0) if first.dim() == 2 else 1
    columns = last.size(1) if last.dim() == 2 else 1
    _bytes_ok(op, rows * columns, torch.promote_types(first.dtype, last.dtype))
    return torch._C._linalg.linalg_multi_dot(list(tensors))


def embedding_renorm_(weight, indices, max_norm, norm_type):
    """``torch.embedding_renorm_`` (what ``F.embedding(..., max_norm=...)`` runs before its
    lookup, under ``no_grad``) after the checks eager ``nn.Embedding`` implies: a 2-d
    floating weight, integer indices within its rows (not negative: the CPU kernel would
    wrap them), ``max_norm`` and ``norm_type`` positive finite numbers (a negative
    ``max_norm`` flips the rows it touches). It only ever scales a named row down to a norm
    of at most ``max_norm``.

    >>> w = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    >>> embedding_renorm_(w, torch.tensor([0, 1]), 1.0, 2.0).norm(dim=1).round(decimals=3).tolist()
    [1.0, 0.5]
    """
    op = "embedding_renorm_"
    _need(
        _is_tensor(weight) and weight.dim() == 2 and weight.is_floating_point(),
        f"{op}: weight must be a 2-d floating tensor",
    )
    _need(
        _is_tensor(indices) and indices.dtype in (torch.int64, torch.int32),
        f"{op}: indices must be an int64 or int32 tensor",
    )
    for name, value in (("max_norm", max_norm), ("norm_type", norm_type)):
        _need(
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0,
            lambda name=name, value=value: (
                f"{op}: {name} must be a positive finite number, not {value!r}"
            ),
        )
    if indices.numel():
        with torch.no_grad():
            low, high = int(indices.min()), int(indices.max())
        rows = weight.size(0)
        _need(
            low >= 0 and high < rows,
            lambda: (
                f"{op}: indices must be within the {rows} rows of the weight, not "
                f"{low if low < 0 else high}"
            ),
        )
    return _VF.embedding_renorm_(weight, indices, max_norm, norm_type)


def eigvals(A):
    """``torch.linalg.eigvals`` after the check ``linalg.eig`` makes and ``eigvals`` does
    not: a matrix with a NaN or an infinity crashed the process (signal 11) in its LAPACK
    kernel. Meta tensors hold no values and pass.

    >>> eigvals(torch.tensor([[2.0, 0.0], [0.0, 3.0]])).real.tolist()
    [2.0, 3.0]
    """
    op = "linalg.eigvals"
    _need(_is_tensor(A) and A.dim() >= 2, f"{op}: A must be a tensor of square matrices")
    if A.device.type != "meta" and A.numel():
        with torch.no_grad():
            finite = bool(torch.isfinite(A).all())
        _need(
            finite,
            f"{op}: the input holds a NaN or an infinity; its LAPACK kernel crashes on them "
            "(linalg.eig refuses them too)",
        )
    return torch._C._linalg.linalg_eigvals(A)


def diagflat(input, offset=0):
    """``torch.diagflat`` after bounding its ``(n + |offset|)`` squared elements (``n`` the
    input's elements: a 2**16-element vector asks for 2**32)."""
    _need(_is_tensor(input), "diagflat: input must be a tensor")
    _need(type(offset) is int, lambda: f"diagflat: offset must be an int, not {offset!r}")
    side = input.numel() + abs(offset)
    _bytes_ok("diagflat", side * side, input.dtype)
    return _VF.diagflat(input, offset)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``torch.addr`` (``beta * input + alpha * outer(vec1, vec2)``) after bounding its
    ``len(vec1) * len(vec2)`` elements, as ``outer`` is."""
    _need(
        all(map(_is_tensor, (input, vec1, vec2))) and vec1.dim() == 1 and vec2.dim() == 1,
        "addr: input is a tensor, vec1 and vec2 are vectors",
    )
    dtype = torch.promote_types(torch.promote_types(vec1.dtype, vec2.dtype), input.dtype)
    _bytes_ok("addr", vec1.numel() * vec2.numel(), dtype)
    return _VF.addr(input, vec1, vec2, beta=beta, alpha=alpha)


def _squares_ok(op: str, A, square_rows: bool, square_columns: bool) -> None:
    """Bound the square results of a factorisation of ``A`` (``(*, m, n)``): ``m x m`` per
    matrix where ``square_rows``, ``n x n`` where ``square_columns``, plus the results no
    larger than ``A`` (the factors, ``min(m, n)`` values)."""
    _need(_is_tensor(A) and A.dim() >= 2, f"{op}: the input must be a tensor of matrices")
    m, n = A.size(-2), A.size(-1)
    batch = A.numel() // (m * n) if m * n else math.prod(A.shape[:-2])
    square = (m * m if square_rows else 0) + (n * n if square_columns else 0)
    _bytes_ok(op, batch * (square + 2 * m * n + min(m, n)), _result_dtype(A))


def linalg_lu(A, *, pivot=True):
    """``torch.linalg.lu`` after bounding its ``m x m`` permutation ``P`` per matrix."""
    _need(isinstance(pivot, bool), "linalg.lu: pivot must be True or False")
    _squares_ok("linalg.lu", A, pivot, False)
    return torch._C._linalg.linalg_lu(A, pivot=pivot)


def svd(input, some=True, compute_uv=True):
    """``torch.svd`` after bounding ``U`` (``m x m``) and ``V`` (``n x n``) of
    ``some=False``."""
    _need(
        isinstance(some, bool) and isinstance(compute_uv, bool),
        "svd: some and compute_uv must be True or False",
    )
    full = compute_uv and not some
    _squares_ok("svd", input, full, full)
    return _VF.svd(input, some, compute_uv)


def linalg_svd(A, full_matrices=True, *, driver=None):
    """``torch.linalg.svd`` after bounding ``U`` (``m x m``) and ``Vh`` (``n x n``) of
    ``full_matrices=True`` (its default)."""
    _need(isinstance(full_matrices, bool), "linalg.svd: full_matrices must be True or False")
    _squares_ok("linalg.svd", A, full_matrices, full_matrices)
    return torch._C._linalg.linalg_svd(A, full_matrices, driver=driver)


def linalg_qr(A, mode="reduced"):
    """``torch.linalg.qr`` after bounding ``Q`` (``m x m``) of ``mode='complete'``."""
    _need(
        mode in ("reduced", "complete", "r"),
        lambda: f"linalg.qr: mode must be 'reduced', 'complete' or 'r', not {mode!r}",
    )
    _squares_ok("linalg.qr", A, mode == "complete", False)
    return torch._C._linalg.linalg_qr(A, mode)


def _matrices(t) -> tuple[tuple[int, ...], int, int]:
    """Batch shape, rows and columns of ``t`` (a vector is one column)."""
    if t.dim() < 2:
        return (), (t.size(0) if t.dim() else 1), 1
    return tuple(t.shape[:-2]), t.size(-2), t.size(-1)


def _solve(op: str, kernel: Callable, a_at: tuple, b_at: tuple) -> Callable:
    """``kernel`` (a solve of ``A`` and ``B``) after bounding what it makes: for every
    matrix of the broadcast batch, a copy of ``A``, a solution of ``max(rows, columns of
    A) x columns(B)`` and a copy of ``B`` (an upper bound of every result of these ops)."""

    def checked(*args, **kwargs):
        picked = []
        for position, *names in (a_at, b_at):  # by position, or by any of its names
            given = [kwargs[n] for n in names if n in kwargs]
            picked.append(args[position] if len(args) > position else next(iter(given), None))
        A, B = picked
        if _is_tensor(A) and _is_tensor(B):
            (batch_a, m, n), (batch_b, r, k) = _matrices(A), _matrices(B)
            try:
                batch = math.prod(torch.broadcast_shapes(batch_a, batch_b))
            except RuntimeError:
                batch = 0  # PyTorch refuses the shapes itself
            each = m * n + max(m, n) * k + r * k
            _bytes_ok(op, batch * each, torch.promote_types(_result_dtype(A), B.dtype))
        return kernel(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = op.replace(".", "_")
    checked.__doc__ = f"``{op}`` after bounding its broadcast results (see :func:`_solve`)."
    return checked


_FIRST = (0, "self", "input", "A")
cholesky_solve = _solve("cholesky_solve", torch.cholesky_solve, (1, "input2"), _FIRST)
triangular_solve = _solve(
    "triangular_solve", torch.triangular_solve, (1, "A"), (0, "self", "input")
)
solve_triangular = _solve(
    "linalg.solve_triangular", torch.linalg.solve_triangular, _FIRST, (1, "B")
)
lu_solve = _solve("linalg.lu_solve", torch.linalg.lu_solve, (0, "LU"), (2, "B"))
lstsq = _solve("linalg.lstsq", torch.linalg.lstsq, _FIRST, (1, "b", "B"))
solve = _solve("linalg.solve", torch.linalg.solve, _FIRST, (1, "B", "other"))
solve_ex = _solve("linalg.solve_ex", torch.linalg.solve_ex, _FIRST, (1, "B", "other"))


def _trapezoid(op: str, kernel: Callable) -> Callable:
    """``kernel`` (``trapezoid``, ``trapz``, ``cumulative_trapezoid``) after bounding the
    broadcast of ``y`` and a sample-point tensor ``x`` of more than one dimension (a
    ``[2**16, 1, 2]`` and a ``[1, 2**16, 2]`` made 2**33 elements): twice its elements
    (the differences of ``x`` and their products with ``y``)."""

    def checked(*args, **kwargs):
        y = args[0] if args else kwargs.get("y", kwargs.get("self", kwargs.get("input")))
        x = args[1] if len(args) > 1 else kwargs.get("x")
        if _is_tensor(y) and _is_tensor(x) and x.dim() > 1:
            try:
                shape = torch.broadcast_shapes(y.shape, x.shape)
            except RuntimeError:
                shape = ()  # PyTorch refuses the shapes itself
            _bytes_ok(op, 2 * math.prod(shape), torch.promote_types(y.dtype, x.dtype))
        return kernel(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = op
    checked.__doc__ = f"``{op}`` after bounding its broadcast (see :func:`_trapezoid`)."
    return checked


trapezoid = _trapezoid("trapezoid", torch.trapezoid)
trapz = _trapezoid("trapz", torch.trapz)
cumulative_trapezoid = _trapezoid("cumulative_trapezoid", torch.cumulative_trapezoid)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``torch.lu_unpack`` after checking the pivots' shape: one int32 pivot per step,
    ``LU.shape[:-2] + (min(m, n),)``. PyTorch checks their values (1 to ``m``) but not
    their count, and its CPU kernel swaps by every pivot given (torch 2.13 took 100000
    pivots for a 4 x 4 factor)."""
    op = "lu_unpack"
    _need(_is_tensor(LU_data) and LU_data.dim() >= 2, f"{op}: LU_data must be a tensor of matrices")
    steps = min(LU_data.size(-2), LU_data.size(-1))
    want = (*LU_data.shape[:-2], steps)
    _need(
        _is_tensor(LU_pivots) and LU_pivots.dtype == torch.int32 and tuple(LU_pivots.shape) == want,
        lambda: (
            f"{op}: LU_pivots must be an int32 tensor of shape {list(want)} (one pivot per "
            f"step of the factorisation), not {getattr(LU_pivots, 'dtype', None)} "
            f"{list(getattr(LU_pivots, 'shape', []))}"
        ),
    )
    _need(
        isinstance(unpack_data, bool) and isinstance(unpack_pivots, bool),
        f"{op}: unpack_data and unpack_pivots must be True or False",
    )
    _squares_ok(op, LU_data, unpack_pivots, False)  # P is m x m
    return _VF.lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


_INT32 = (-(2**31), 2**31 - 1)


def _observer_buffers(op: str, x, buffers: dict, per_row: bool) -> None:
    """The four observer buffers the kernel reads and writes through raw pointers, one
    element per index it loops over: each contiguous (an expanded or strided buffer is read
    and written past its own elements), on ``x``'s device, float32 (``zero_point`` int32),
    one element each for a per-tensor observer; for a per-row one (axis 0, as the kernel
    requires), ``x.size(0)`` each, or none yet in ``running_min``/``running_max`` (the
    kernel then sizes all four, as on a module's first call)."""
    for name, t in buffers.items():
        want = torch.int32 if name == "zero_point" else torch.float32
        _need(
            _is_tensor(t) and t.dtype == want and t.device == x.device and t.is_contiguous(),
            lambda name=name, want=want: (
                f"{op}: {name} must be a contiguous {want} tensor on the input's device"
            ),
        )
    low, high = buffers["running_min"].numel(), buffers["running_max"].numel()
    scales, points = buffers["scale"].numel(), buffers["zero_point"].numel()
    if not per_row:
        _need(
            low == high == scales == points == 1,
            lambda: (
                f"{op}: a per-tensor observer has one running_min, running_max, scale and "
                f"zero_point, not {low}, {high}, {scales}, {points}"
            ),
        )
        return
    rows = x.size(0)
    _need(
        low == high and low in (0, rows) and scales == points and scales in {low, rows},
        lambda: (
            f"{op}: a per-row observer has {rows} running_min, running_max, scale and "
            f"zero_point values (one per row of the input), not {low}, {high}, {scales}, {points}"
        ),
    )


def fused_moving_avg_obs_fake_quant(
    self,
    observer_on,
    fake_quant_on,
    running_min,
    running_max,
    scale,
    zero_point,
    averaging_const,
    quant_min,
    quant_max,
    ch_axis,
    per_row_fake_quant=False,
    symmetric_quant=False,
):
    """``torch.fused_moving_avg_obs_fake_quant`` (``FusedMovingAvgObsFakeQuantize``, the
    default quantisation-aware-training fake quantiser) after checking what its CPU kernel
    trusts: it loops over the observer buffers through raw pointers by the input's rows
    (empty buffers crashed the process, an expanded one is read past its element), and it
    writes them in place (the running statistics, ``scale``, ``zero_point``: buffers)."""
    op = "fused_moving_avg_obs_fake_quant"
    x = self
    _need(
        _is_tensor(x) and x.dtype == torch.float32 and x.dim() >= 1,
        f"{op}: the input must be a float32 tensor of at least one dimension",
    )
    for name, flag in (("observer_on", observer_on), ("fake_quant_on", fake_quant_on)):
        _need(
            _is_tensor(flag) and flag.numel() == 1,
            lambda name=name: f"{op}: {name} must be a one-element tensor",
        )
    for name, flag in (
        ("per_row_fake_quant", per_row_fake_quant),
        ("symmetric_quant", symmetric_quant),
    ):
        _need(isinstance(flag, bool), lambda name=name: f"{op}: {name} must be True or False")
    # A per-tensor observer reads no axis (QAT modules pass -1); a per-row one only 0.
    _need(
        type(ch_axis) is int
        and -x.dim() <= ch_axis < x.dim()
        and (ch_axis == 0 or not per_row_fake_quant),
        lambda: (
            f"{op}: ch_axis must be 0 for a per-row observer, and a dimension of the "
            f"{x.dim()}-d input, not {ch_axis!r}"
        ),
    )
    _need(
        isinstance(averaging_const, (int, float))
        and not isinstance(averaging_const, bool)
        and 0 <= averaging_const <= 1,
        lambda: f"{op}: averaging_const must be a number in [0, 1], not {averaging_const!r}",
    )
    _need(
        type(quant_min) is int
        and type(quant_max) is int
        and _INT32[0] <= quant_min <= quant_max <= _INT32[1],
        lambda: (
            f"{op}: quant_min and quant_max must be int32 values with quant_min <= "
            f"quant_max, not {quant_min!r} and {quant_max!r}"
        ),
    )
    buffers = {
        "running_min": running_min,
        "running_max": running_max,
        "scale": scale,
        "zero_point": zero_point,
    }
    _observer_buffers(op, x, buffers, per_row_fake_quant)
    return _VF.fused_moving_avg_obs_fake_quant(
        x,
        observer_on,
        fake_quant_on,
        running_min,
        running_max,
        scale,
        zero_point,
        averaging_const,
        quant_min,
        quant_max,
        ch_axis,
        per_row_fake_quant,
        symmetric_quant,
    )


CHECKED: dict[str, Callable] = {
    "fused_moving_avg_obs_fake_quant": fused_moving_avg_obs_fake_quant,
    "linalg.vander": vander,
    "histogram": histogram,
    "cov": cov,
    "corrcoef": corrcoef,
    "linalg.multi_dot": multi_dot,
    "diagflat": diagflat,
    "lu_unpack": lu_unpack,
    "addr": addr,
    "embedding_renorm_": embedding_renorm_,
    "linalg.eigvals": eigvals,
    "linalg.lu": linalg_lu,
    "svd": svd,
    "linalg.svd": linalg_svd,
    "linalg.qr": linalg_qr,
    "cholesky_solve": cholesky_solve,
    "triangular_solve": triangular_solve,
    "linalg.solve_triangular": solve_triangular,
    "linalg.lu_solve": lu_solve,
    "linalg.lstsq": lstsq,
    "linalg.solve": solve,
    "linalg.solve_ex": solve_ex,
    "trapezoid": trapezoid,
    "trapz": trapz,
    "cumulative_trapezoid": cumulative_trapezoid,
}
