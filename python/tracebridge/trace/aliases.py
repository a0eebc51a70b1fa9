"""Deprecated or private spellings of op-set ops, recorded as the public op they compute.

Note: one op per computation. ``torch.lu`` (deprecated) calls the private
``_lu_with_info(A, pivot, check_errors)``, which is ``linalg.lu_factor_ex`` under another
name (the same three results: LU, int32 pivots, info), and ``torch.lu_solve(b, LU, piv)``
is ``linalg.lu_solve(LU, piv, b)``; ``torch.chain_matmul(*ms)``
(deprecated) is ``linalg.multi_dot(ms)``; ``x.adjoint()`` / ``torch.adjoint(x)`` is the
view ``x.mH``. Recording the public op keeps private names out of the graph, and gives a
backend one op to support instead of two.
"""

from __future__ import annotations

import torch


class AliasHandlers:
    """Handlers for the spellings above (mixed into the Tracer through
    :class:`~tracebridge.trace.library.LibraryHandlers`)."""

    def _alias_handlers(self) -> dict:
        return {
            torch._lu_with_info: self._on_lu_with_info,
            torch.lu_solve: self._on_lu_solve,
            torch._C.TensorBase.lu_solve: self._on_lu_solve,
            torch.chain_matmul: self._on_chain_matmul,
            torch.adjoint: self._on_adjoint,
            torch._C.TensorBase.adjoint: self._on_adjoint,
        }

    def _on_lu_with_info(self, func, input, pivot=True, check_errors=True):
        kwargs = {"pivot": pivot, "check_errors": check_errors}
        factor = torch._C._linalg.linalg_lu_factor_ex
        result = self.record("linalg.lu_factor_ex", factor, (input,), kwargs)
        return torch.return_types._lu_with_info(tuple(result))  # the type torch.lu returns

    def _on_lu_solve(self, func, b, LU_data, LU_pivots):
        """``torch.lu_solve(b, LU, pivots)`` is ``linalg.lu_solve(LU, pivots, b)``."""
        solve = torch._C._linalg.linalg_lu_solve
        return self.record("linalg.lu_solve", solve, (LU_data, LU_pivots, b), {})

    def _on_chain_matmul(self, func, *matrices):
        if len(matrices) < 2:  # one matrix: PyTorch returns it as is; keep its own call
            with self.mode:
                return matrices[0] if matrices else func()
        multi_dot = torch._C._linalg.linalg_multi_dot
        return self.record("linalg.multi_dot", multi_dot, (list(matrices),), {})

    def _on_adjoint(self, func, input):
        with self.mode:
            return input.mH
