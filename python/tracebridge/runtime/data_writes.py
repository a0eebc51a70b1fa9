"""Writes through a parameter's ``.data`` reach the values kept from the state.

Note: why a hook on ``Tensor.data``. The values a traced or loaded program keeps from its
state (folded constants, memos keyed on state, a weight kept in another layout:
runtime/folding.py, runtime/memo.py, runtime/layouts.py) are checked against each source
tensor's identity, version and data pointer. ``p.data`` is a tensor of its own over the
same memory, with a version counter of its own: a write through it (``p.data.mul_(2)``,
``w = layer.weight.data`` kept and copied into later, weight clipping, older optimisers)
moves nothing those checks read, and the next call without autograd served the values
kept from before the write, where eager and torch.jit read the new weights.

Taking ``.data`` is the one step every such write needs, so tracebridge watches it on
parameters: the ``data`` property of ``nn.Parameter`` reads torch's C getter as before
and, where the parameter is one that kept values were made from (:func:`keep`), drops
every kept value (:func:`~tracebridge.invalidate_caches`) and marks the parameter for
good (:func:`taken`): the caller may hold the alias and write through it at any later
time, so values made from a marked tensor are never kept again -- they are made on every
call, as eager makes them. ``.data`` of any other parameter costs a dictionary lookup
more (about 0.1 us); the setter (``p.data = w``, which moves the data pointer the checks
read) is torch's own, and so are the reads of a Parameter's deep copy and pickle, which
copy the memory and hand no alias out (they mark nothing).

Why parameters only: a parameter requires grad, so writing it in place outside
``torch.no_grad()`` raises, and ``.data`` is how code writes it (the pattern above); a
buffer is written in place directly, which moves its version. A property on
``nn.Parameter`` leaves ``torch.Tensor`` as torch made it: a torch function mode or
subclass (the tracer among them) still sees the C getter's ``__get__`` for every
``.data`` read, and ``torch.compile`` runs through it. Not seen, as before: a write through
a buffer's ``.data``, and writes below torch, through memory handed out without a tensor
(``p.detach().numpy()``, ``untyped_storage()``, DLPack, ``data_ptr()`` with ctypes) --
call :func:`~tracebridge.invalidate_caches` after those.
"""

from __future__ import annotations

import sys

import torch

_C_DATA = torch._C.TensorBase.data
_get_data = _C_DATA.__get__
_set_data = _C_DATA.__set__
_Parameter = torch.nn.Parameter

# Marks in a parameter's own ``__dict__`` (no registry: a weak reference would make
# ``torch.utils.swap_tensors`` refuse the tensor, and a registry of ids outlives them).
# They travel with the Python object, and ``swap_tensors`` moves them with the data.
_KEPT_FROM = "_tracebridge_kept_from"  # values were kept from it
_TAKEN = "_tracebridge_data_taken"  # its .data was taken since


def keep(tensors) -> None:
    """Note that values are kept from ``tensors`` (state tensors): taking ``.data`` of a
    parameter among them then drops them."""
    for tensor in tensors:
        if isinstance(tensor, _Parameter):
            found = tensor.__dict__
            if _KEPT_FROM not in found:
                found[_KEPT_FROM] = True


def taken(tensors) -> bool:
    """Whether ``.data`` was ever taken of one of ``tensors`` since values were kept from
    it: nothing made from them may be kept."""
    return any(_TAKEN in t.__dict__ for t in tensors if isinstance(t, _Parameter))


# torch's own readers of ``.data`` that copy it and hand out no alias: a deep copy or a
# pickle of a Parameter (``copy.deepcopy(model)``, ``torch.save(model)``) marks nothing.
_COPYING_READERS = frozenset(
    getattr(_Parameter, name).__code__
    for name in ("__deepcopy__", "__reduce_ex__")
    if hasattr(getattr(_Parameter, name), "__code__")
)


def _caller_code():
    """The code of the Python frame that read ``.data``, or None where C code read it
    (R through reticulate: there is no Python frame above)."""
    caller = sys._getframe(1).f_back
    return caller.f_code if caller is not None else None


def _data(self):
    found = self.__dict__
    if (
        _KEPT_FROM in found
        and _TAKEN not in found
        and _caller_code() not in _COPYING_READERS
    ):
        found[_TAKEN] = True
        from .folding import invalidate_caches

        invalidate_caches()
    return _get_data(self)


def watch() -> None:
    """Make ``nn.Parameter.data`` the watching property (once per process)."""
    if not isinstance(_Parameter.__dict__.get("data"), property):
        _Parameter.data = property(_data, _set_data, doc=_C_DATA.__doc__)


watch()
