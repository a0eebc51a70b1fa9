"""The checked implementations added in op-set 7 and after, by op name, from the modules
that hold them (one table, so the runtime registers them in one place:
``support.default_callable``)."""

from __future__ import annotations

from collections.abc import Callable

from . import checked_indices, checked_numeric, checked_ops10, checked_selections

CHECKED_SINCE_7: dict[str, Callable] = {
    **checked_selections.CHECKED,  # nonzero, argwhere, the unique family
    **checked_numeric.CHECKED,  # products of sizes, sizes as arguments, embedding_renorm_
    **checked_ops10.CHECKED,  # op-set 10: vander, pdist, pad_sequence, empty_strided
    **checked_indices.CHECKED,  # index values checked where the kernel asserts on a device
}
