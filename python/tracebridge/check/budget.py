"""Bytes and work a graph asks for from what the file itself holds (SPEC section 3, Limits).

Note: what is counted. A value whose shape the file alone decides (a state entry, a factory
with sizes written in the file, a ``tensor`` literal, and what ops make of those) has a
shape the checker can know at load. This module follows such shapes through the ops whose
result shape is plain arithmetic on their inputs' (factories, elementwise ops, matrix
products, ``outer``, ``kron``, ``cartesian_prod``, ``diag_embed``, ``repeat``, ``one_hot``
with a class count, reshapes) and, for each result, counts its **bytes** (elements times the
width of its dtype: a ``complex128`` element is 16 bytes) against ``alloc_bytes`` for one
allocation and ``graph_alloc_bytes`` for the graph, and the **multiply-adds** of matrix
products (and the pairs of boxes ``torchvision.nms`` compares) against ``work_macs``. A
value whose shape depends on an input of the graph is not counted here: the caller's data
decides it, as in eager PyTorch. Sizes that are values of the graph (``zeros(prim.item(t))``),
and results sized by values (``bincount``, ``one_hot`` without a class count), are bounded
at the call (``runtime/checked_ops.py``).

Note: every other op, on meta tensors. The rules above cover families of ops; a file may
use any op of the set on operands it makes for nothing (a one-element literal expanded to
``[2**16, 1]``), and ``diag``, ``cdist``, ``einsum``, ``pad``, ``embedding`` by an expanded
index or ``contiguous`` of an expand then asked for gigabytes that no rule counted. So an
op without a rule whose tensor arguments all have shapes the file decides runs on meta
tensors (:meth:`Budget._meta`: PyTorch's shape functions, no data), and each result with
more elements than its operands *hold* (:attr:`Budget.held`: an expand holds its base's
elements, a view of the caller's data none) is counted as the rules count theirs; a view
with more elements than its operands hold is bounded as an expand. A cast, a transpose or
a sort of materialised data makes nothing new and is only followed. Dtypes come from what
the file's arguments decide (:meth:`Budget._rule_dtype`), never from what values declare.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from typing import Any

import torch

from ..ir import dtypes
from ..ir import ops as opset
from ..ir.program import Ref, decode, map_literal

DEFAULT_WIDTH = 4  # torch's default dtype, float32: a loaded program never changes it
# Factories whose default dtype is int64.
_INT_FACTORIES = frozenset("randint randperm tril_indices triu_indices".split())
_FACTORIES = frozenset("zeros ones full empty rand randn randint empty_strided".split())
# The window functions (op-set 10): a vector of ``window_length`` elements.
_WINDOWS = frozenset(
    "hann_window hamming_window blackman_window bartlett_window kaiser_window".split()
)
_NEW_FACTORIES = frozenset(
    "Tensor.new_zeros Tensor.new_ones Tensor.new_full Tensor.new_empty".split()
)
_LIKE = frozenset("zeros_like ones_like full_like empty_like rand_like randn_like clone".split())
_RESHAPES = frozenset("Tensor.view Tensor.reshape reshape".split())
_EXPANDS = frozenset("Tensor.expand broadcast_to".split())

Shape = tuple[int, ...]

# Ops the meta rule (Budget._meta) never runs: their number of results is a size or a
# count the file writes (unbind of 2**28 rows would make 2**28 meta tensors), they read
# data (a meta tensor has none), or their meta form loops over an argument (``diff``'s
# decomposition runs ``n`` times: 5 s at load for ``n = 10**5``, where the kernel stops
# once the input is empty).
_NO_META = frozenset(
    """unbind split chunk tensor_split hsplit vsplit dsplit unsafe_split unsafe_chunk
    split_with_sizes combinations nonzero argwhere unique
    unique_consecutive unique_dim masked_select bincount histogram diff
    Tensor.cpu Tensor.type""".split()
)
# The most tensors one node may give the meta rule: some meta kernels are Python
# decompositions that take about half a millisecond per operand (``block_diag``).
_META_OPERANDS = 256
_META_DEVICE = torch.device("meta")
_JOINS = frozenset({"cat", "concat", "concatenate", "stack"})
# Ops of one tensor whose results have its shape (see Budget._same_shape): how many results.
_SAME_SHAPE: dict[str, int | str] = {
    **dict.fromkeys(
        "triu tril softmax log_softmax special.softmax special.log_softmax cumsum cumprod "
        "logcumsumexp flip fliplr flipud roll clone Tensor.contiguous".split(),
        1,
    ),
    "sort": 2,
    "argsort": "positions",
}
_WIDENS = frozenset({"cumsum", "cumprod"})
# Results of the meta rule by what decides them (Budget._meta_key): the layers of a model
# repeat their shapes, and some meta kernels are Python decompositions (``triu``: 5 ms).
_META_CACHE: dict[str, list | None] = {}
_META_CACHE_SIZE = 4096
_DTYPE_NAMES = {dtype: name for name, dtype in dtypes.DTYPES.items()}
# A dtype of each width, for a value whose dtype the rules do not know.
_BY_WIDTH = {1: "uint8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}
_INT_BY_WIDTH = {1: "bool", 2: "int16", 4: "int32", 8: "int64", 16: "complex128"}


def _ints(lit: Any) -> list[int] | None:
    """The integers of a size literal (``[2, 3]``, ``{"tuple": [2, 3]}`` or ``4``)."""
    if isinstance(lit, dict) and set(lit) == {"tuple"}:
        lit = lit["tuple"]
    if isinstance(lit, bool):
        return None
    if isinstance(lit, int):
        return [lit]
    if isinstance(lit, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in lit):
        return list(lit)
    return None


def _numel(shape: Shape) -> int:
    return math.prod(max(d, 0) for d in shape)


def _broadcast(shapes: list[Shape]) -> Shape | None:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None  # PyTorch refuses it at the call
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _data_shape(data: Any) -> tuple[Shape, int] | None:
    """The shape of ``tensor(data)``'s nested lists, and the width of its inferred dtype."""
    shape: list[int] = []
    level = data
    while isinstance(level, list):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    return tuple(shape), dtypes.ITEMSIZE[_data_dtype(data)]


def _data_dtype(data: Any) -> str:
    """The dtype ``tensor(data)`` infers from its first element (the default dtype's for
    floats and for no element)."""
    leaf = data
    while isinstance(leaf, list) and leaf:
        leaf = leaf[0]
    if isinstance(leaf, bool):
        return "bool"
    if isinstance(leaf, int):
        return "int64"
    if isinstance(leaf, dict) and "complex" in leaf:
        return "complex64"
    return _BY_WIDTH[DEFAULT_WIDTH]


class Budget:
    """The counts over one graph. ``state`` is the document's state table (shapes and
    dtypes are there for files; an in-memory program has none, and nothing is counted)."""

    def __init__(self, state: dict, limits: dict, elementwise: frozenset[str]):
        self.state, self.limits = state, limits
        self.elementwise = elementwise
        self.known: dict[int, tuple[Shape, int]] = {}  # value id -> (shape, width)
        # value id -> the elements its memory holds: an expand of one element holds 1
        # however many it shows, and what an op makes from it is new memory.
        self.held: dict[int, int] = {}
        self.dtype: dict[int, str] = {}  # value id -> its dtype as the rules know it
        # value id -> the memory it is a view of (value ids, or "state:NAME" for a state
        # tensor, read by any number of nodes): the meta rule counts each memory once.
        self.roots: dict[int, frozenset] = {}
        self.root_numel: dict[str, int] = {}  # "state:NAME" -> its elements
        self.alloc_total = 0
        self.work_total = 0

    # -- what a node makes --

    def node(self, op: str, node: dict) -> str:
        """Count the node's result; the reason the graph is refused, or ``""``."""
        outputs = node["outputs"]
        view = self._view(op, node["args"], node["kwargs"])
        if view is not None and not any(d is None or d < 0 for d in view[0]):
            if op in _EXPANDS and _numel(view[0]) > self.limits["literal_numel"]:
                return (
                    f"{op} makes a view of shape {list(view[0])[:8]} ({_numel(view[0])} "
                    f"elements) from sizes the file holds, more than the limit of "
                    f"{self.limits['literal_numel']}"
                )
            if len(outputs) == 1:
                self.known[outputs[0]["id"]] = view
                base = node["args"][0]
                held = self._held(base) if isinstance(base, dict) and "ref" in base else None
                if held is not None and base["ref"] in self.dtype:
                    self.dtype[outputs[0]["id"]] = self.dtype[base["ref"]]
                if held is not None:
                    self.roots[outputs[0]["id"]] = self._roots(base["ref"])
                # A view of the caller's data holds nothing the file can count on.
                self.held[outputs[0]["id"]] = (
                    held if held is not None else (0 if op in _EXPANDS else _numel(view[0]))
                )
            return ""
        made = self._result(op, node["args"], node["kwargs"])
        if made is None:
            return self._meta(op, node)
        shape, width, work = made
        if len(outputs) == 1:
            self.dtype[outputs[0]["id"]] = self._rule_dtype(op, node, width)
        return self._count(op, outputs, shape, width, work)

    def _rule_dtype(self, op: str, node: dict, width: int) -> str:
        """The dtype of a result the rules above follow, as the file's arguments decide it
        (never the dtype a value declares: a file may declare an int64 index float64, and
        the meta rule would then see an op refuse what the call runs)."""
        given = node["kwargs"].get("dtype")
        if isinstance(given, dict) and given.get("dtype") in dtypes.DTYPES:
            return given["dtype"]
        if op == "tensor" and node["args"]:
            return _data_dtype(node["args"][0])
        for ref in _refs(node):
            name = self.dtype.get(ref["ref"])
            if name is not None and dtypes.ITEMSIZE.get(name) == width:
                return name
        return _BY_WIDTH.get(width, "float32")

    def _held(self, lit: Any) -> int | None:
        if isinstance(lit, dict) and set(lit) == {"ref"} and lit["ref"] in self.known:
            vid = lit["ref"]
            return self.held.get(vid, _numel(self.known[vid][0]))
        return None

    def _roots(self, vid: int) -> frozenset:
        return self.roots.get(vid, frozenset((vid,)))

    def _operands_hold(self, node: dict) -> tuple[int, frozenset]:
        """The elements a node's known operands hold, each memory once (a tensor named
        k times, k views of one tensor or k reads of one weight hold it once: else
        ``cat`` of them would hold k-fold, and a chain of such nodes grow uncounted),
        and the memories themselves."""
        roots = frozenset().union(
            *(self._roots(r["ref"]) for r in _refs(node) if r["ref"] in self.known)
        )
        held = 0
        for root in roots:
            if root in self.root_numel:
                held += self.root_numel[root]
            elif root in self.known:
                held += self.held.get(root, _numel(self.known[root][0]))
        return held, roots

    def _count(self, op: str, outputs: list, shape: Shape, width: int, work: int) -> str:
        """Count one new tensor of ``shape`` at ``width`` (and ``work`` multiply-adds);
        the reason the graph is refused, or ``""``."""
        size = _numel(shape) * width
        if size > self.limits["alloc_bytes"]:
            return (
                f"{op} makes a tensor of shape {list(shape)[:8]} ({size} bytes) from sizes "
                f"the file holds, more than the limit of {self.limits['alloc_bytes']} bytes"
            )
        self.alloc_total += size
        if self.alloc_total > self.limits["graph_alloc_bytes"]:
            return (
                f"the tensors this graph makes from sizes the file holds take "
                f"{self.alloc_total} bytes in all, more than the limit of "
                f"{self.limits['graph_alloc_bytes']}"
            )
        self.work_total += work
        if self.work_total > self.limits["work_macs"]:
            return (
                f"the matrix products (and box comparisons) this graph computes on tensors "
                f"the file holds take {self.work_total} multiply-adds in all, more than the "
                f"limit of {self.limits['work_macs']}"
            )
        if len(outputs) == 1 and outputs[0].get("kind") == "Tensor":
            self.known[outputs[0]["id"]] = (shape, width)
            self.held[outputs[0]["id"]] = _numel(shape)
        return ""

    # -- the rule for every other op: its result shapes, computed on meta tensors --

    def _meta(self, op: str, node: dict) -> str:
        """An op without a rule above, all of whose tensor arguments have shapes the file
        decides: its results' shapes come from running it on meta tensors (shapes and
        dtypes, no data, nothing allocated). A result with more elements than its operands
        hold is new memory the file decides (``diag`` of an expanded vector, ``cdist``,
        ``einsum``, ``pad``, ``embedding`` by an expanded index, ``contiguous`` of an
        expand), counted as the rules above count theirs; a view with more elements than
        its operands hold (``Tensor.unfold``) is bounded as an expand. Results no larger
        than what their operands hold (a cast, a sort, a transpose) are only followed."""
        outputs = node["outputs"]
        if op in _NO_META or op.startswith(("prim.", "scalar.")) or not outputs:
            return ""
        if len(outputs) > 8 or any(v.get("kind") != "Tensor" for v in outputs):
            return ""
        made = self._meta_results(op, node)
        if made is None or len(made) != len(outputs):
            return ""
        held, roots = self._operands_hold(node)
        for value, (shape, width, is_view, dtype) in zip(outputs, made):
            numel = _numel(shape)
            if dtype is not None:
                self.dtype[value["id"]] = dtype
            if is_view:
                if numel > held and numel > self.limits["literal_numel"]:
                    return (
                        f"{op} makes a view of shape {list(shape)[:8]} ({numel} elements) of "
                        f"tensors whose shapes the file decides and that hold {held}, more "
                        f"than the limit of {self.limits['literal_numel']}"
                    )
                self.known[value["id"]] = (shape, width)
                self.held[value["id"]] = min(numel, held)
                self.roots[value["id"]] = roots
                continue
            if numel > held:
                reason = self._count(op, [value], shape, width, 0)
                if reason:
                    return reason
            elif roots:
                # Not counted, so it stands for its operands' memory: k uncounted copies
                # of one tensor (detach, a cast) joined by cat hold it once, not k times.
                self.roots[value["id"]] = roots
            self.known[value["id"]] = (shape, width)
            self.held[value["id"]] = numel
        return ""

    def _meta_results(
        self, op: str, node: dict
    ) -> list[tuple[Shape, int, bool, str | None]] | None:
        """``op``'s results on meta tensors of the known shapes: each one's shape, element
        width and whether it is a view of an operand; None where an argument is not known
        or the op refuses them. Remembered by what decides them (:data:`_META_CACHE`)."""
        info = opset.OPS.get(op)
        if info is None or info.impl is None:
            return None
        ids = [r["ref"] for r in _refs(node)]
        if not ids or any(i not in self.known for i in ids):
            return None
        by_hand = self._same_shape(op, node, ids) or self._joined(op, node, ids)
        if by_hand is not None or len(ids) > _META_OPERANDS:
            return None if by_hand is None else by_hand
        taken = self._taken_rows(op, node)
        if taken is not None:
            return [taken]
        key = self._meta_key(op, node)
        if key in _META_CACHE:
            return _META_CACHE[key]
        made = self._run_meta(info, node, ids, integral=False)
        if made is None and any(i not in self.dtype for i in ids):
            # values of a dtype the rules do not know (an expand of the caller's data) may be
            # the indices of the op: try them as integers
            made = self._run_meta(info, node, ids, integral=True)
        if len(_META_CACHE) >= _META_CACHE_SIZE:
            # Loads in threads share the memo: another may have just dropped the same key.
            with contextlib.suppress(KeyError, StopIteration, RuntimeError):
                _META_CACHE.pop(next(iter(_META_CACHE)))
        _META_CACHE[key] = made
        return made

    def _same_shape(self, op: str, node: dict, ids: list[int]) -> list | None:
        """Ops of one tensor whose results have its shape (a causal mask's ``triu``,
        ``softmax``, ``cumsum``, ``sort``...), sized by hand. Note: why by hand. Their
        meta forms are Python decompositions that call ``torch._check``, whose first call
        imports sympy: 1-5 s of the first load, for a model whose mask is
        ``triu(ones(n, n))`` (the whole load is 0.1 s)."""
        outputs = _SAME_SHAPE.get(op)
        args = node["args"]
        if outputs is None or len(ids) != 1 or not args or args[0] != {"ref": ids[0]}:
            return None
        shape, width = self.known[ids[0]]
        dtype = self.dtype.get(ids[0])
        literals = (*args[1:], *node["kwargs"].values())
        if op in _WIDENS or any(isinstance(a, dict) and "dtype" in a for a in literals):
            width, dtype = max(width, 8), None  # cumsum of bools is int64; dtype= casts
        made = [(shape, width, False, dtype)]
        if outputs == 2:  # sort: the values, then int64 positions
            made.append((shape, 8, False, "int64"))
        return made if outputs != "positions" else [(shape, 8, False, "int64")]

    def _joined(self, op: str, node: dict, ids: list[int]) -> list | None:
        """``cat``/``stack``, sized by hand (any number of operands: past
        :data:`_META_OPERANDS` other ops are not run, their meta forms being Python
        decompositions that cost per operand): a join of one tensor named 1024 times, or
        of 1024 views of it, makes 1024 times what it holds."""
        args, kwargs = node["args"], node["kwargs"]
        if (
            op not in _JOINS
            or not args
            or not isinstance(args[0], list)
            or len(ids) != len(args[0])
        ):
            return None
        shapes = [self.known[i][0] for i in ids]
        rank = len(shapes[0])
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        if not isinstance(dim, int) or isinstance(dim, bool) or any(len(s) != rank for s in shapes):
            return None
        width = max(self.known[i][1] for i in ids)
        dtype = {self.dtype.get(i) for i in ids}
        dtype = dtype.pop() if len(dtype) == 1 else None
        if op == "stack":
            if not -rank - 1 <= dim <= rank or len(set(shapes)) != 1:
                return None
            dim %= rank + 1
            return [(shapes[0][:dim] + (len(ids),) + shapes[0][dim:], width, False, dtype)]
        if rank == 0 or not -rank <= dim < rank:
            return None
        dim %= rank
        joined = sum(s[dim] for s in shapes)
        return [(shapes[0][:dim] + (joined,) + shapes[0][dim + 1 :], width, False, dtype)]

    def _taken_rows(self, op: str, node: dict) -> tuple[Shape, int, bool, str | None] | None:
        """``x[index]`` with one integer index tensor (a relative position bias's
        ``table[index]``): ``index``'s shape then ``x``'s other sizes, without running
        the meta kernel. Note: why by hand. Most of torch's meta kernels call
        ``torch._check``, whose first call imports sympy (1-6 s of a load on a busy
        machine, where the whole load of a Swin is 0.3 s); this is the op that made
        zoo models pay it."""
        args = node["args"]
        if op != "getitem" or node["kwargs"] or len(args) != 2:
            return None
        if not all(isinstance(a, dict) and set(a) == {"ref"} for a in args):
            return None
        (x_shape, width), (i_shape, i_width) = (self.known[a["ref"]] for a in args)
        i_dtype = self.dtype.get(args[1]["ref"])
        if i_dtype not in ("int64", "int32") or dtypes.ITEMSIZE.get(i_dtype) != i_width:
            return None
        if not x_shape:
            return None
        return (tuple(i_shape) + tuple(x_shape[1:]), width, False, self.dtype.get(args[0]["ref"]))

    def _meta_key(self, op: str, node: dict) -> str:
        """What decides an op's results on meta tensors: its literals, and for each tensor
        its shape, width, declared dtype and whether it is an expand."""

        def describe(lit: Any) -> Any:
            if isinstance(lit, dict) and set(lit) == {"ref"}:
                vid = lit["ref"]
                shape, width = self.known[vid]
                expanded = self.held.get(vid, _numel(shape)) < _numel(shape)
                return ["T", list(shape), width, self.dtype.get(vid), expanded]
            if isinstance(lit, dict):
                return {k: describe(v) for k, v in lit.items()}
            if isinstance(lit, list):
                return [describe(x) for x in lit]
            return lit

        return json.dumps([op, describe(node["args"]), describe(node["kwargs"])], sort_keys=True)

    def _run_meta(
        self, info, node: dict, ids: list[int], integral: bool
    ) -> list[tuple[Shape, int, bool, str | None]] | None:
        try:
            meta = {i: self._meta_tensor(i, integral) for i in ids}

            def leaf(x):
                if type(x) is Ref:
                    return meta[x.id]
                # Note: a device the file names (randint_like(x, 9, device="cpu"),
                # x.to("cpu")) would make the op allocate and fill real memory of the
                # file's sizes here, at load, and its result, not on meta, would escape
                # the count: the op runs on meta whatever device the file names.
                return _META_DEVICE if _is_device(x) else x

            args = map_literal(decode(node["args"]), leaf)
            kwargs = {k: map_literal(decode(v), leaf) for k, v in node["kwargs"].items()}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = info.impl(*args, **kwargs)
        except Exception:  # the op refuses these shapes (the call will too), or needs data
            return None
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if not all(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in results):
            return None
        # A view of an operand (its base, or the base an expanded operand is a view of)
        # holds no memory of its own; a view of a tensor the op made inside is new memory.
        bases = {id(t) for t in meta.values()} | {
            id(t._base) for t in meta.values() if t._base is not None
        }
        return [
            (
                tuple(t.shape),
                t.element_size(),
                id(t) in bases or id(t._base) in bases,
                _DTYPE_NAMES.get(t.dtype),
            )
            for t in results
        ]

    def _meta_tensor(self, vid: int, integral: bool = False) -> torch.Tensor:
        shape, width = self.known[vid]
        name = self.dtype.get(vid)
        if name not in dtypes.DTYPES or dtypes.ITEMSIZE.get(name) != width:
            name = (_INT_BY_WIDTH if integral else _BY_WIDTH).get(width, "float32")
        dtype = dtypes.DTYPES[name]
        if self.held.get(vid, _numel(shape)) < _numel(shape):  # an expand: stride 0 as at the call
            return torch.empty((1,) * len(shape), dtype=dtype, device="meta").expand(shape)
        return torch.empty(shape, dtype=dtype, device="meta")

    def state_read(self, name: str, vid: int) -> None:
        entry = self.state.get(name)
        if isinstance(entry, dict) and isinstance(entry.get("shape"), list):
            width = dtypes.ITEMSIZE.get(entry.get("dtype"), 16)
            if entry.get("dtype") in dtypes.DTYPES:
                self.dtype[vid] = entry["dtype"]
            self.known[vid] = (tuple(entry["shape"]), width)
            if isinstance(entry.get("dtype"), str):
                self.dtype[vid] = entry["dtype"]
            self.roots[vid] = frozenset((f"state:{name}",))
            self.root_numel[f"state:{name}"] = _numel(self.known[vid][0])

    def _of(self, lit: Any) -> tuple[Shape, int] | None:
        if isinstance(lit, dict) and set(lit) == {"ref"}:
            return self.known.get(lit["ref"])
        return None

    def _width(self, kwargs: dict, default: int) -> int:
        dtype = kwargs.get("dtype")
        if isinstance(dtype, dict) and "dtype" in dtype:
            return dtypes.ITEMSIZE.get(dtype["dtype"], 16)
        return default

    # -- result shapes, one small rule per family --

    def _result(self, op: str, args: list, kwargs: dict) -> tuple[Shape, int, int] | None:
        rules = (self._factory, self._product, self._matrix, self._elementwise, self._nms)
        for rule in (*rules, self._squares):
            made = rule(op, args, kwargs)
            if made is not None:
                return made
        return None

    def _factory(self, op, args, kwargs):
        default = 8 if op in _INT_FACTORIES else DEFAULT_WIDTH
        if op in _FACTORIES:
            at = 1 if op == "randint" and len(args) >= 2 else 0
            at = 2 if op == "randint" and len(args) >= 3 else at
            spread = op in ("zeros", "ones", "empty", "rand", "randn") and len(args) > 1
            sizes = _ints(list(args) if spread else kwargs.get("size", args[at] if args else None))
            return (tuple(sizes), self._width(kwargs, default), 0) if sizes else None
        if op in _WINDOWS:
            sizes = _ints(args[0] if args else kwargs.get("window_length"))
            return (tuple(sizes), self._width(kwargs, DEFAULT_WIDTH), 0) if sizes else None
        if op in _NEW_FACTORIES and args:
            base = self._of(args[0])
            sizes = _ints(kwargs.get("size", args[1] if len(args) > 1 else None))
            if sizes is None and len(args) > 1:
                sizes = _ints(list(args[1:]))
            width = self._width(kwargs, base[1] if base else 16)
            return (tuple(sizes), width, 0) if sizes else None
        if op in _LIKE and args:
            base = self._of(args[0])
            return (base[0], self._width(kwargs, base[1]), 0) if base else None
        if op == "eye":  # eye(n, m=None): by position or by keyword
            positional = [a for a in args if not isinstance(a, dict)][:2]
            n = positional[0] if positional else kwargs.get("n")
            m = positional[1] if len(positional) > 1 else kwargs.get("m")
            sizes = _ints([n, n if m is None else m]) if n is not None else None
            if sizes:
                return ((sizes[0], sizes[-1]), self._width(kwargs, DEFAULT_WIDTH), 0)
        if op == "tensor" and args:
            found = _data_shape(args[0])
            return (found[0], self._width(kwargs, found[1]), 0) if found else None
        return None

    def _product(self, op, args, kwargs):
        known = [self._of(a) for a in args]
        if op == "outer" and len(known) >= 2 and all(known[:2]):
            (a, wa), (b, wb) = known[:2]
            return ((_numel(a), _numel(b)), max(wa, wb), 0)
        if op == "kron" and len(known) >= 2 and all(known[:2]):
            (a, wa), (b, wb) = known[:2]
            rank = max(len(a), len(b))
            a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
            return (tuple(x * y for x, y in zip(a, b)), max(wa, wb), 0)
        if op == "cartesian_prod" and args:
            items = args[0] if isinstance(args[0], list) else args
            shapes = [self._of(t) for t in items]
            if shapes and all(shapes):
                rows = math.prod(_numel(s) for s, _ in shapes)
                return ((rows, len(shapes)), max(w for _, w in shapes), 0)
        if op == "diag_embed" and known and known[0]:
            shape, width = known[0]
            offset = args[1] if len(args) > 1 else kwargs.get("offset", 0)
            if shape and isinstance(offset, int) and not isinstance(offset, bool):
                side = shape[-1] + abs(offset)
                return (shape[:-1] + (side, side), width, 0)
        if op in ("Tensor.repeat", "tile") and known and known[0]:
            reps = _ints(args[1] if len(args) == 2 else list(args[1:]))
            if reps:
                shape, width = known[0]
                shape = (1,) * (len(reps) - len(shape)) + shape
                reps = [1] * (len(shape) - len(reps)) + reps
                return (tuple(s * r for s, r in zip(shape, reps)), width, 0)
        if op == "repeat_interleave" and known and known[0]:
            return self._repeat_interleave(known[0], args, kwargs)
        if op == "one_hot" and known and known[0]:
            classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            if isinstance(classes, int) and classes > 0:
                return (known[0][0] + (classes,), 8, 0)
        return None

    def _repeat_interleave(self, known: tuple[Shape, int], args: list, kwargs: dict):
        """``repeat_interleave(x, n, dim)`` with a written ``n``: ``x``'s elements times ``n``
        (flattened without a dim), at ``x``'s width (2**27 repeats of one complex128
        element are 2 GiB, though fewer elements than ``literal_numel``)."""
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        dim = args[2] if len(args) > 2 else kwargs.get("dim")
        if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 0:
            return None
        shape, width = known
        if dim is None:
            return ((_numel(shape) * repeats,), width, 0)
        if isinstance(dim, int) and not isinstance(dim, bool) and -len(shape) <= dim < len(shape):
            grown = list(shape)
            grown[dim] = max(grown[dim], 0) * repeats
            return (tuple(grown), width, 0)
        return None

    def _squares(self, op, args, kwargs):
        """Op-set 7's products of sizes, as ``outer`` is counted: ``diagflat`` of ``n``
        elements makes ``(n + |offset|)**2``, ``addr`` ``len(vec1) * len(vec2)``, ``cov``
        and ``corrcoef`` of ``r`` rows ``r * r`` (a float result, at least float32),
        ``linalg.vander(x, N=n)`` ``x.numel() * n``, ``linalg.multi_dot`` the rows of its
        first matrix times the columns of its last (work: the products left to right, at
        least what PyTorch's chosen order costs)."""
        known = [self._of(a) for a in args]
        if op == "diagflat" and known and known[0]:
            offset = args[1] if len(args) > 1 else kwargs.get("offset", 0)
            if isinstance(offset, int) and not isinstance(offset, bool):
                side = _numel(known[0][0]) + abs(offset)
                return ((side, side), known[0][1], 0)
        if op == "addr" and len(known) >= 3 and known[1] and known[2]:
            (a, wa), (b, wb) = known[1], known[2]
            return ((_numel(a), _numel(b)), max(wa, wb), 0)
        if op in ("cov", "corrcoef") and known and known[0]:
            shape, width = known[0]
            rows = shape[0] if len(shape) == 2 else 1
            return ((rows, rows), max(width, DEFAULT_WIDTH), 0)
        if op == "linalg.vander" and known and known[0]:
            n = kwargs.get("N")
            if isinstance(n, int) and not isinstance(n, bool):
                shape, width = known[0]
                return (shape + (n,), width, 0)
        if op == "linalg.multi_dot" and args and isinstance(args[0], list):
            shapes = [self._of(t) for t in args[0]]
            if len(shapes) >= 2 and all(shapes) and all(1 <= len(s) <= 2 for s, _ in shapes):
                mats = [s if len(s) == 2 else ((1, s[0]) if i == 0 else (s[0], 1))
                        for i, (s, _) in enumerate(shapes)]  # fmt: skip
                work = sum(mats[0][0] * m[0] * m[1] for m in mats[1:])
                return ((mats[0][0], mats[-1][1]), max(w for _, w in shapes), work)
        return None

    def _nms(self, op, args, kwargs):
        """``torchvision.nms`` of ``N`` boxes the file holds: up to ``N`` int64 indices,
        after comparing up to ``N * N`` pairs of boxes (counted as work)."""
        if op != "torchvision.nms":
            return None
        boxes = self._of(args[0] if args else kwargs.get("dets"))
        if boxes is None or len(boxes[0]) != 2:
            return None
        count = max(boxes[0][0], 0)
        return ((count,), 8, count * count)

    def _view(self, op, args, kwargs) -> tuple[Shape, int] | None:
        """The shape of a view whose sizes the file writes (a reshape to literal sizes, an
        expand of a known shape): no allocation, but an expand may present many more
        elements than it holds, and a later op reads them all."""
        if not args or not (op in _RESHAPES or op in _EXPANDS):
            return None
        sizes = _ints(kwargs.get("size", args[1] if len(args) == 2 else list(args[1:])))
        base = self._of(args[0])
        if not sizes:
            return None
        if op in _RESHAPES:
            if -1 not in sizes:
                return (tuple(sizes), base[1] if base else 8)
            if base and sizes.count(-1) == 1:
                rest = math.prod(s for s in sizes if s != -1)
                numel = _numel(base[0]) // rest if rest else 0
                return (tuple(numel if s == -1 else s for s in sizes), base[1])
            return None
        if base is None:
            return (tuple(sizes), 8) if -1 not in sizes else None
        shape = (None,) * (len(sizes) - len(base[0])) + base[0]
        if len(shape) != len(sizes):
            return None  # PyTorch refuses it at the call
        return (tuple(b if s == -1 else s for s, b in zip(sizes, shape)), base[1])

    def _matrix(self, op, args, kwargs):
        if op in ("addmm", "baddbmm", "addbmm", "addmv"):
            args = args[1:]
        elif op not in ("mm", "bmm", "matmul", "mv", "linear", "dot", "inner", "vdot"):
            return None
        known = [self._of(a) for a in args[:2]]
        if len(known) < 2 or not all(known):
            return None
        (a, wa), (b, wb) = known
        width = max(wa, wb)
        if op == "linear":
            if not a or len(b) != 2:
                return None
            rows = _numel(a[:-1])
            return (a[:-1] + (b[0],), width, rows * b[0] * b[1])
        if not a or not b:
            return None
        a2 = a if len(a) > 1 else (1,) + a
        b2 = b if len(b) > 1 else b + (1,)
        batch = _broadcast([a2[:-2], b2[:-2]]) if len(a2) > 2 or len(b2) > 2 else ()
        if batch is None:
            return None
        out = batch + (a2[-2], b2[-1])
        work = _numel(out) * a2[-1]
        keep = [True] * len(batch) + [len(a) > 1, len(b) > 1]  # a vector operand's dim goes
        shape = tuple(d for d, kept in zip(out, keep) if kept)
        if op == "addbmm":
            shape = out[-2:]
        return (shape, width, work)

    def _elementwise(self, op, args, kwargs):
        if op not in self.elementwise:
            return None
        tensors = [a for a in args if isinstance(a, dict) and set(a) == {"ref"}]
        known = [self._of(a) for a in tensors]
        if not known or not all(known):
            return None
        shape = _broadcast([s for s, _ in known])
        if shape is None:
            return None
        return (shape, max(w for _, w in known), 0)


def _is_device(x: Any) -> bool:
    """Whether a decoded literal names a device (``torch.device`` or a string such as
    ``"cpu"``): the meta rule puts ``meta`` in its place."""
    if isinstance(x, torch.device):
        return True
    if not isinstance(x, str) or len(x) > 32:
        return False
    try:
        torch.device(x)
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def _refs(node: dict) -> list[dict]:
    """The ``{"ref": id}`` literals among a node's arguments and keywords, at any depth."""
    found: list[dict] = []
    stack: list[Any] = [node["args"], list(node["kwargs"].values())]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if set(item) == {"ref"}:
                found.append(item)
            else:
                stack.extend(item.values())
    return found
