"""Ops whose results are chosen by the data (``nonzero``, ``unique_consecutive``), recorded
as the op-set ops they are.

Note: Python forms that the op set cannot name.
  ``torch.nonzero(x, as_tuple=True)`` is a keyword of PyTorch's Python binding, not of the
  native op: recorded as it was called, the node named a keyword no reader knows and the
  save was refused after a trace that looked fine. It is what the binding computes:
  ``nonzero(x)`` (one row of indices per true element, ``[k, rank]``) split into one index
  vector per dimension. The rank is fixed by the graph's input types, so the split is one
  ``select`` per dimension (``unbind`` would warn of an unrolled loop that is not one).
  ``torch.unique_consecutive`` (and ``Tensor.unique_consecutive``) are Python wrappers
  that re-dispatch to themselves under a mode; recorded here as the native
  ``unique_consecutive`` they run, which always makes three tensors. Their sizes come from
  the data but are bounded by the input: no result has more elements than the input (the
  inverse indices as many, int64), so nothing here asks for bytes a file could choose.
"""

from __future__ import annotations

import torch

_NONZERO = (torch.nonzero, torch._C.TensorBase.nonzero)
_UNIQUE_CONSECUTIVE = (torch.unique_consecutive, torch.Tensor.unique_consecutive)


class SelectionHandlers:
    """Handlers for ``nonzero(as_tuple=...)`` and ``unique_consecutive`` (mixed into the
    Tracer through :class:`~tracebridge.trace.library.LibraryHandlers`)."""

    def _selection_handlers(self) -> dict:
        handlers = {fn: self._on_nonzero for fn in _NONZERO}
        handlers.update({fn: self._on_unique_consecutive for fn in _UNIQUE_CONSECUTIVE})
        return handlers

    def _on_nonzero(self, func, input, *, as_tuple=False, **rest):
        """``nonzero(x)`` as recorded; ``as_tuple=True`` adds one ``select`` per dimension
        (a 0-d input counts as 1-d, as the binding does)."""
        if rest.get("out", 0) is None:
            del rest["out"]  # the default
        if rest:  # ``out=t``: the recorder refuses the keyword at this line
            return self.record("nonzero", torch.nonzero, (input,), rest)
        if not as_tuple:
            return self.record("nonzero", torch.nonzero, (input,), {})
        with torch._C.DisableTorchFunction():
            rank = input.dim()
        with self.mode:
            rows = torch.nonzero(input.unsqueeze(0) if rank == 0 else input)
            return tuple(rows.select(1, i) for i in range(max(rank, 1)))

    def _on_unique_consecutive(
        self, func, input, return_inverse=False, return_counts=False, dim=None
    ):
        """``unique_consecutive`` recorded as the native op (three results), with the
        result PyTorch's wrapper returns for these flags."""
        kwargs = {"return_inverse": return_inverse, "return_counts": return_counts, "dim": dim}
        result = self.record(
            "unique_consecutive",
            torch._C._VariableFunctions.unique_consecutive,
            (input,),
            kwargs,
        )
        return unique_results(result, return_inverse, return_counts)


def unique_results(result: tuple, return_inverse: bool, return_counts: bool):
    """What ``torch.unique`` and ``unique_consecutive`` return for these flags, from the
    native op's three results (output, inverse indices, counts)."""
    output, inverse, counts = result
    if return_inverse and return_counts:
        return output, inverse, counts
    if return_inverse:
        return output, inverse
    if return_counts:
        return output, counts
    return output
