"""Generate a Python function from a Graph, one short method per construct.

Note: nothing from the file becomes code.
  * The function is built as a Python AST (``ast.FunctionDef``) and compiled from the AST;
    no text is ever parsed. Every identifier in it is made here: parameters ``in0, in1``,
    values ``v0, v1`` (numbered in order of definition, not by the file's ids), and globals
    ``op_relu_0``, ``c1``, ``G2`` ... bound to objects (an op's prefix only for names of
    the op table; every global ends in a unique number); even builtins it calls are bound
    under names of its own (``_getattr``). The method's name is set on the function
    afterwards, as data.
  * Literals are ``ast.Constant`` or containers of them (lists and dicts built fresh on
    every call, since an op may keep them); objects without a literal form (dtypes,
    devices, slices) are bound constants. Operator precedence comes from the tree:
    ``(-2) ** v`` is a ``Pow`` whose left side is the constant ``-2``.
  * Strings of the file that only describe (source locations, state and op names) are in
    a side table, shown in ``.code`` and tracebacks as escaped comments. State keys and
    keyword names that are not plain identifiers reach the call as data (``**{key: v}``).

The generated function takes the flattened input tensors, reads state through ``(dict,
key)`` slots (so ``.to()``, ``.double()`` and ``load_state_dict`` are seen on every call),
calls each op's implementation (``support.node_callable``) directly, checks guards inline,
frees each value after its last use, and returns the outputs in their traced structure.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import itertools
import keyword
import linecache
import math
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import ArtifactError
from ..ir import GeneratorRef, Graph, Node, Ref, pytree, refs_in
from ..ir import ops as opset
from ..ir.analysis import last_uses, state_reads
from ..ir.program import fold_literal
from . import (
    arguments,
    basic_index,
    checked_indices,
    checked_ops,
    concat_linear,
    contiguous,
    cse,
    dead_code,
    folding,
    generators,
    halves,
    identity,
    inplace,
    layouts,
    lean,
    linear_2d,
    memo,
    repeats,
    same_shape,
    scalars,
    sealed,
    size_checks,
    squares,
    support,
    unbinds,
    unit_products,
    views,
)

# Ops written as Python operators when their implementation is the default one. Not
# ``scalar.mul``, ``scalar.pow``, ``scalar.lshift``: a few of them can build an integer of
# gigabytes (squaring doubles its bits), so they call the op table's bounded functions,
# exactly as the interpreter does -- except a product by a small literal (``n * 4``, how
# heads and sizes are computed), which adds at most 32 bits per node (``_small_factor``),
# and a product of sizes whose bits stay bounded (``_small_product``, see its Note).
_BINARY = {
    "scalar.add": ast.Add,
    "scalar.sub": ast.Sub,
    "scalar.truediv": ast.Div,
    "scalar.floordiv": ast.FloorDiv,
    "scalar.mod": ast.Mod,
    "scalar.and": ast.BitAnd,
    "scalar.or": ast.BitOr,
    "scalar.rshift": ast.RShift,
    "scalar.xor": ast.BitXor,
}
_COMPARE = {
    "scalar.eq": ast.Eq,
    "scalar.ne": ast.NotEq,
    "scalar.lt": ast.Lt,
    "scalar.le": ast.LtE,
    "scalar.gt": ast.Gt,
    "scalar.ge": ast.GtE,
}
# prim op -> (arity, builder over the argument expressions): attribute reads and method
# calls on a tensor, which a call through a lambda would only slow down.
_ATTRIBUTE_PRIMS = {
    "prim.size": (2, lambda t, d: ast.Subscript(_attr(t, "shape"), d, ast.Load())),
    "prim.numel": (1, lambda t: _method(t, "numel")),
    "prim.dtype": (1, lambda t: _attr(t, "dtype")),
    "prim.device": (1, lambda t: _attr(t, "device")),
    "prim.item": (1, lambda t: _method(t, "item")),
    "prim.tolist": (1, lambda t: _method(t, "tolist")),
    # x.stride()[d] is x.stride(d) (an IndexError out of range either way) in 0.11 us, not
    # 0.18 (torch 2.13): no arguments to parse.
    "prim.stride": (2, lambda t, d: ast.Subscript(_method(t, "stride"), d, ast.Load())),
    "prim.requires_grad": (1, lambda t: _attr(t, "requires_grad")),
    "prim.is_contiguous": (1, lambda t: _method(t, "is_contiguous")),
    "prim.storage_offset": (1, lambda t: _method(t, "storage_offset")),
    "prim.is_inference": (1, lambda t: _method(t, "is_inference")),
    "prim.is_leaf": (1, lambda t: _attr(t, "is_leaf")),
    "prim.has_grad_fn": (
        1,
        lambda t: ast.Compare(_attr(t, "grad_fn"), [ast.IsNot()], [ast.Constant(None)]),
    ),
    "prim.is_neg": (1, lambda t: _method(t, "is_neg")),
    "prim.is_conj": (1, lambda t: _method(t, "is_conj")),
    # support.PRIM_FUNCTIONS' ``t.device.type == kind``, without the lambda's frame (a
    # mixture of experts asks it of each layer's hidden states: 12 frames a call)
    "prim.is_device_type": (
        2,
        lambda t, kind: ast.Compare(_attr(_attr(t, "device"), "type"), [ast.Eq()], [kind]),
    ),
}
_INLINE = {*_BINARY, *_COMPARE, *_ATTRIBUTE_PRIMS, "scalar.neg"}
# Tensor methods that take sizes as one sequence or spread: ``x.view((a, b))`` parses
# about 0.5 us slower than ``x.view(a, b)`` (torch 2.13, one thread), so the code spreads
# a literal sequence of integers (Hugging Face models write ``view(shape)`` in every layer).
_SPREAD = frozenset({"Tensor.view", "Tensor.reshape", "Tensor.permute"})
# Helpers the generated code calls, under names of its own.
_HELPERS = {
    "_getattr": getattr,
    "_KIND": support.DTYPE_KIND,
    "_bad_input": support.bad_input,
    "_not_repeated": support.check_not_repeated,
    "_raise_guard": support.raise_guard,
    "_check_count": support.check_count,
    "_is_grad_enabled": torch.is_grad_enabled,
    "_set_grad_enabled": torch._C._set_grad_enabled,
    "_type": type,
    "_state_get": dict.__getitem__,  # a sealed state table's read (runtime/sealed.py)
    "_Tensor": torch.Tensor,
    # tensors whose type runs no torch function of its own (a Parameter's is disabled)
    "_PLAIN_TENSORS": (torch.Tensor, torch.nn.Parameter),
    "_int": int,
    "_float": float,
    "_RuntimeError": RuntimeError,
    "_enter_lean": lean.enter,
    "_InferenceMode": torch._C._InferenceMode,
    "_normal_copies": lean.normal_copies,
}
_PLAIN_CONSTANTS = (bool, int, float, complex, str)
_EXACT_CONSTANTS = frozenset(_PLAIN_CONSTANTS)
# The local that holds whether the folded tensors of a call are plain (runtime/folding.py).
FOLDED_PLAIN = "_folded_plain"
_COMMENT_LIMIT = 160


def _name(id_: str) -> ast.Name:
    return ast.Name(id_, ast.Load())


def _attr(value: ast.expr, attr: str) -> ast.Attribute:
    return ast.Attribute(value, attr, ast.Load())


def _method(value: ast.expr, attr: str, *args: ast.expr) -> ast.Call:
    return ast.Call(_attr(value, attr), list(args), [])


def _call(func: str, *args: ast.expr) -> ast.Call:
    return ast.Call(_name(func), list(args), [])


def _constant(value) -> ast.expr:
    """A constant of an exact builtin type (a subclass of int is not one the compiler
    knows); a negative number is ``-(abs)``, so that ``ast.unparse`` shows ``(-2) ** v``
    as Python reads it, not ``-2 ** v``."""
    if value is None:
        return ast.Constant(None)
    if type(value) in _EXACT_CONSTANTS:  # most: a literal list holds thousands of them
        exact = value
    else:
        exact = next(t for t in _PLAIN_CONSTANTS if isinstance(value, t))(value)
    negative_int = type(exact) is int and exact < 0
    negative_float = type(exact) is float and math.copysign(1.0, exact) < 0  # -0.0 too
    if negative_int or negative_float:
        return ast.UnaryOp(ast.USub(), ast.Constant(-exact))
    return ast.Constant(exact)


def comment(text: str) -> str:
    """``text`` made safe for a ``#`` comment: one line, printable ASCII, bounded."""
    safe = str(text).encode("unicode_escape").decode("ascii")
    return safe if len(safe) <= _COMMENT_LIMIT else safe[: _COMMENT_LIMIT - 3] + "..."


def _is_keyword_name(key) -> bool:
    return type(key) is str and key.isascii() and key.isidentifier() and not keyword.iskeyword(key)


@dataclass
class Generated:
    """A generated function, the text that shows it, and where each line came from."""

    function: Callable
    code: str  # ast.unparse of the tree, line by line, with escaped comments
    locations: dict[int, str] = field(default_factory=dict)  # line of ``code`` -> loc


class CodeGen:
    """Builds the AST of one graph's function. ``methods`` are the program's graphs by
    name, for ``support.node_callable``."""

    def __init__(
        self,
        graph: Graph,
        slots: dict,
        name: str,
        guards: bool,
        methods: dict[str, Graph] | None = None,
        fold: bool = False,
    ):
        self.graph = graph
        self.fold = fold  # compute values of literals and state once (runtime/folding.py)
        # The state is a frozen program's own and never changes (runtime/frozen.py): folded
        # values and the state's types are not checked again on each call.
        self.frozen = False
        # A loaded object's seal (runtime/sealed.py): while intact, folded values and the
        # state's types are not checked again; its tables are read by dict's own method.
        self.seal = None
        # Compute repeated nodes once (runtime/cse.py): for calls without autograd only, where
        # nothing flows back through them (one node read twice sums its gradients first,
        # two nodes each add theirs: the same gradient, not the same bits).
        self.common = False
        self.no_autograd = False  # common, and the graph never turns gradients on (build)
        self.slots = slots
        self.name = name
        self.guards = guards
        self.methods = methods or {}
        # Builtins stay reachable for C code that imports (PyImport_Import reads the
        # caller's builtins); the generated code itself names only what it bound.
        self.globals: dict = {"__builtins__": builtins}
        self.names: dict[int, str] = {}  # value id -> local name
        self._made: dict[str, int] = {}  # a name define() made -> the value it holds
        self._spare: list[str] = []  # those free() gave back, for define() to take again
        self._dead: set[int] = set()  # values free() deleted (ref() refuses them)
        self._no_del: set[int] | None = None  # values whose del frees nothing (_kept_alive)
        self._scalars: dict[tuple, torch.Tensor] = {}  # scalar_as_tensor's, by number
        self._slices: dict[tuple, slice] = {}  # literal slices, by their parts' types and values
        self.body: list[tuple[ast.stmt, str | None, str | None]] = []  # stmt, comment, loc
        self.constants: list[tuple[str, object]] = []  # for the display only
        self._bound: dict[int, str] = {}  # id(object) -> global name
        self._where = "the graph"
        self._defined = 0
        self.int_bits: dict[int, int] = {}  # value id -> bound of its bits (_int_bits)
        self.python_ints: set[int] = set()  # values that are Python ints (_python_ints)
        self._view_members: set[int] = set()  # indices of nodes that trees of views run
        self._view_calls: dict[int, list[views.ViewTree]] = {}  # index -> trees called there
        self._halves: dict[int, halves.Halves] = {}  # index of either node -> its pair
        self._same_shape: set[int] = set()  # reshapes that may be a shape test (same_shape.py)
        self._index = -1  # the index of the node being written
        self._merged: dict[int, int] = {}  # reshape -> the contiguous it runs (contiguous.py)
        self._merged_away: set[int] = set()  # those contiguous nodes
        self._repeats: dict[int, repeats.Repeat] = {}  # each node of a repeat_kv -> it
        self._inplace: dict[int, str] = {}  # index -> its operand's dtype (inplace.py)
        self._kinds: dict[int, str] | None = None  # value id -> kind, made when first needed
        self._state_reads: dict[int, str] | None = None  # value id -> state name (likewise)
        self._dtypes: dict[int, str | None] | None = None  # value id -> traced dtype name
        self.plain_read = False  # whether the code reads ``_plain`` (runtime/scalars.py)
        # Calls without autograd run in inference mode but for these nodes (runtime/lean.py)
        self.lean = False
        self._outside_lean: set[int] = set()
        self._lean_plan: lean.LeanPlan | None = None
        self._reentered = -1  # where the body last entered inference mode again
        self._fold: folding.FoldPlan | None = None  # the static part the code folds (build)
        self._static: set[int] | None = None  # values of literals and state alone (layouts)
        self._static_shapes: dict[int, list | None] = {}  # and their traced shapes
        # Guards that a product of sizes is not 1, by their first node (unit_products.py)
        self._unit_products: dict[int, unit_products.UnitProduct] = {}

    # -- names ------------------------------------------------------------------------------

    def bind(self, prefix: str, obj) -> ast.Name:
        """A global name for ``obj``, made here (the same object gets the same name; a
        number makes names unique whatever the prefix)."""
        key = id(obj)
        if key not in self._bound:
            name = f"{prefix}{len(self._bound)}"
            self._bound[key] = name
            self.globals[name] = obj
        return _name(self._bound[key])

    def helper(self, name: str) -> ast.Name:
        self.globals[name] = _HELPERS[name]
        return _name(name)

    def define(self, value) -> str:
        # A counter, not len(names): a file that defines an id twice must still get
        # distinct variables (the checker refuses it; the runtime never mixes values up).
        # A name whose value was deleted (:meth:`free`) is taken again first.
        if self._spare:
            name = self._spare.pop()
        else:
            name = f"v{self._defined}"
            self._defined += 1
        self._made[name] = value.id
        self.names[value.id] = name
        return name

    def ref(self, ref: Ref) -> ast.Name:
        name = self.names.get(ref.id)
        if name is None or ref.id in self._dead:
            raise ArtifactError(
                f"{self._where} uses value {ref.id!r}, which is not defined before it; "
                "the file is corrupt (run tracebridge validate)"
            )
        return _name(name)

    # -- expressions ------------------------------------------------------------------------

    def literal(self, arg) -> ast.expr:
        """The expression for an argument: refs become names, literals constants."""
        return fold_literal(arg, self._leaf, self._container)

    def _leaf(self, arg) -> ast.expr:
        if isinstance(arg, Ref):
            return self.ref(arg)
        if arg is None or isinstance(arg, _PLAIN_CONSTANTS):
            return _constant(arg)
        if arg is Ellipsis:
            return ast.Constant(...)
        if isinstance(arg, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return self.constant(arg)
        if isinstance(arg, GeneratorRef):  # read at the call: a reseed or swap reaches it
            table, key = generators.slot(self.slots, arg.name, self._where)
            reader = self.bind("R", generators.read)
            return ast.Call(
                reader, [self.bind("S", table), _constant(key), _constant(arg.name)], []
            )
        raise ArtifactError(
            f"{self._where}: cannot run a literal of type {type(arg).__name__}; the file is "
            "corrupt (run tracebridge validate)"
        )

    def _container(self, arg, children: list) -> ast.expr:
        if isinstance(arg, list):
            return ast.List(children, ast.Load())
        if isinstance(arg, dict):
            return ast.Dict([k for k, _ in children], [v for _, v in children])
        if isinstance(arg, slice):
            if any(isinstance(p, Ref) for p in (arg.start, arg.stop, arg.step)):
                self.globals["_slice"] = slice
                return _call("_slice", *children)
            return self.constant(arg)  # immutable: one object for every call
        return ast.Tuple(children, ast.Load())

    def constant(self, obj) -> ast.Name:
        if type(obj) is slice:  # immutable: one object (one local) for equal slices
            parts = (obj.start, obj.stop, obj.step)
            obj = self._slices.setdefault(tuple((type(p), p) for p in parts), obj)
        before = len(self._bound)
        name = self.bind("c", obj)
        if len(self._bound) > before:
            self.constants.append((name.id, obj))
        return name

    def arguments(self, node: Node) -> tuple[list[ast.expr], list[ast.keyword]]:
        args = [self.literal(a) for a in node.args]
        kwargs = []
        for key, value in node.kwargs.items():
            if _is_keyword_name(key):
                kwargs.append(ast.keyword(key, self.literal(value)))
            else:  # still the op's keyword, passed as data, never as syntax
                kwargs.append(
                    ast.keyword(None, ast.Dict([self.literal(key)], [self.literal(value)]))
                )
        return args, kwargs

    def callable_for(self, node: Node) -> Callable:
        """The function a node calls (``support.node_callable``; a subclass may route some
        nodes elsewhere). A concatenation of weights that runtime/concat_linear.py made
        runs through its own check."""
        if isinstance(node, concat_linear.ConcatNode):
            return functools.partial(concat_linear.concat_weights, rows=node.rows)
        return support.node_callable(node, self.methods)

    def call(self, node: Node) -> ast.expr:
        fn = self.callable_for(node)
        if (
            self.fold
            and node.op in arguments.SIGNATURES
            # a bounded node (runtime/checked_sizes.py) passes its call on as it is given
            and getattr(fn, "bounds", fn) is support.default_callable(node.op)
        ):
            node = self.shortened(node)
        args, kwargs = self.arguments(node)
        if not kwargs and node.op in _INLINE and fn is support.default_callable(node.op):
            inline = _inline(node.op, args)
            if inline is not None:
                return inline
        small = _small_factor(node) or _small_product(node, self.int_bits)
        if small and fn is support.default_callable(node.op):
            return ast.BinOp(args[0], ast.Mult(), args[1])
        if self.fold and self._spreads(node) and fn is support.default_callable(node.op):
            args = [args[0], *args[1].elts]  # x.view((a, b)) as x.view(a, b): see _SPREAD
        if self.fold and node.op in scalars.OPS and fn is support.default_callable(node.op):
            args = self.scalar_as_tensor(node, args)
        if fn is _CHECKED_INDEXING.get(node.op) and _basic_index(node, self.python_ints):
            fn = opset.impl_of(node.op)  # no index values to check: the kernel itself
        call = ast.Call(self.bind(_op_prefix(node.op), fn), args, kwargs)
        if self.fold and getattr(fn, "cpu_kernel", None) is not None and args:
            return self.cpu_first(node, fn.cpu_kernel, args, kwargs, call)
        if self.fold and getattr(fn, "covering", None) is not None:
            return self.unless_uncovered(node, fn, args, kwargs, call)
        sized = getattr(fn, "__name__", "").startswith("sized_")  # checked_ops.sized_guard
        if self.fold and node.op in _BOUNDED_FACTORIES and sized:
            return self.unless_large(node, call)
        if self.fold and node.op in _BOUNDED_REPEATS and sized and isinstance(node.args[0], Ref):
            return self.unless_large(node, call, repeated=node.args[0])
        if self.fold and node.op == "arange" and sized:
            return self.unless_long_range(node, call)
        if self.fold and node.op == "Tensor.expand" and sized and isinstance(node.args[0], Ref):
            return self.unless_large_view(node, call)
        return call

    def cpu_first(self, node: Node, kernel, args, kwargs, call: ast.Call) -> ast.expr:
        """``call`` (an index op whose values runtime/checked_indices.py checks where the
        device's kernel does not), or its kernel at once where the first argument is a
        plain tensor on the CPU and ``CHECK_ON_CPU`` is off: the test the checked function
        makes first, inline, without its frame (about 0.5 us of a 2 us ``gather``; a
        mixture of experts' routing indexes 7 times a call). The flag is read on every
        call, so a test that sets it reaches loaded code too."""
        first = node.args[0]
        if not isinstance(first, Ref):
            return call
        value = self.ref(first)
        plain = ast.Compare(_call("_type", value), [ast.In()], [self.helper("_PLAIN_TENSORS")])
        self.helper("_type")
        flag = _attr(self.bind("M", checked_indices), "CHECK_ON_CPU")
        test = ast.BoolOp(ast.And(), [plain, _attr(value, "is_cpu"), ast.UnaryOp(ast.Not(), flag)])
        kernel_call = ast.Call(self.bind(_op_prefix(node.op), kernel), args, kwargs)
        return ast.IfExp(test, kernel_call, call)

    def unless_uncovered(self, node: Node, fn, args, kwargs, call: ast.Call) -> ast.expr:
        """``call`` (a convolution bounded at the call: runtime/checked_sizes.py), or the
        kernel itself where the weight is a plain tensor whose kernel covers the literal
        padding (``fn.covering``): the test the bounded function makes first, inline,
        without its Python frame (data2vec_audio's positional convolutions: 16 a call)."""
        weight = args[1] if len(args) > 1 else None
        if not isinstance(weight, ast.Name) or any(k.arg in (None, "weight") for k in kwargs):
            return call
        kernel = fn.covering
        w = weight.id
        self.helper("_type")
        tests: list[ast.expr] = [
            ast.Compare(_call("_type", _name(w)), [ast.In()], [self.helper("_PLAIN_TENSORS")]),
            ast.Compare(_attr(_name(w), "ndim"), [ast.Eq()], [ast.Constant(len(kernel) + 2)]),
        ]
        for i, k in enumerate(kernel):
            extent = ast.Subscript(_attr(_name(w), "shape"), ast.Constant(2 + i), ast.Load())
            tests.append(ast.Compare(extent, [ast.GtE()], [ast.Constant(k)]))
        test = ast.BoolOp(ast.And(), tests)
        return ast.IfExp(
            test, ast.Call(self.bind(_op_prefix(node.op), fn.bounds), args, kwargs), call
        )

    def default_call(self, node: Node) -> bool:
        """Whether ``node`` runs the op table's own implementation of its op."""
        return self.callable_for(node) is support.default_callable(node.op)

    def shortened(self, node: Node) -> Node:
        """``node``, or a copy whose literal arguments are written the way torch parses
        fastest, with the same meaning (runtime/arguments.py)."""
        found = arguments.shorter(node)
        if found is None:
            return node
        return Node(node.op, found[0], found[1], node.outputs, node.out_spec, node.loc)

    def unless_large(self, node: Node, call: ast.expr, repeated: Ref | None = None) -> ast.expr:
        """``call`` (a factory whose sizes are values, through ``checked_ops.sized_guard``),
        or, where every size is an int, the kernel itself when the sizes' product times
        16 bytes (the widest element) is within the allocation limit, and ``call``
        otherwise: the bound the guard checks first, without its Python frame (about
        1.4 us of 3.5 for a ``new_ones``, torch 2.13, one thread). A negative size passes
        the test or not; either way the kernel refuses it, as after the guard. Each value
        is tested to be a Python int first, unless it is one whatever the file declares
        (:func:`_python_ints`): a file may declare any node's result an int, and the
        product of a tensor wraps around (``16 * n`` of an int32 ``n = 2**28`` is 0)
        where the guard reads the tensor's value.

        ``repeated``: the tensor that ``Tensor.repeat`` or ``tile`` repeats (Autoformer's
        auto-correlation: 20 a call), whose elements multiply the sizes' product as in
        the guard; the test first asks it to be a plain tensor, whose ``numel`` is what
        the guard reads."""
        kinds = self.kinds()
        sizes = []
        for arg in support.size_arguments(node):
            sizes.extend(arg if isinstance(arg, (list, tuple)) else [arg])
        ints = (type(s) is int or isinstance(s, Ref) and kinds.get(s.id) == "int" for s in sizes)
        if not all(ints):
            return call
        product: ast.expr = ast.Constant(16)
        if repeated is not None:
            product = ast.BinOp(product, ast.Mult(), _method(self.ref(repeated), "numel"))
        for size in sizes:
            if not (type(size) is int and size == 1):
                product = ast.BinOp(product, ast.Mult(), self.literal(size))
        values = dict.fromkeys(
            s.id for s in sizes if isinstance(s, Ref) and s.id not in self.python_ints
        )
        tests: list[ast.expr] = [
            ast.Compare(_call("_type", self.ref(Ref(v))), [ast.Is()], [self.helper("_int")])
            for v in values
        ]
        if repeated is not None:
            plain = _call("_type", self.ref(repeated))
            tests.insert(0, ast.Compare(plain, [ast.Is()], [self.helper("_Tensor")]))
        if tests:
            self.helper("_type")
        tests.append(ast.Compare(product, [ast.LtE()], [ast.Constant(checked_ops.ALLOC_BYTES)]))
        test = tests[0] if len(tests) == 1 else ast.BoolOp(ast.And(), tests)
        args, kwargs = self.arguments(node)
        kernel = self.bind(_op_prefix(node.op), support.default_callable(node.op))
        return ast.IfExp(test, ast.Call(kernel, args, kwargs), call)

    def unless_large_view(self, node: Node, call: ast.expr) -> ast.expr:
        """``call`` (a ``Tensor.expand`` whose sizes are values, through
        ``checked_ops.sized_guard``'s view check), or the kernel itself where the input is
        a plain tensor, every size value is an int of at least 0 and 16 bytes times the
        input's elements times the sizes (a literal -1 keeps the input's extent: left out)
        is within the allocation limit: the result then has no more elements than that
        (each size either keeps the input's extent or replaces an extent of at least 1, or
        of 0 with a 0), so the guard's checks would pass; without its two or three Python
        frames (Funnel's attention: 10 expands a call). A size value of -1 or below, or a
        larger result, takes the guard, which refuses or passes it as before."""
        kinds = self.kinds()
        sizes = []
        for arg in support.size_arguments(node):
            sizes.extend(arg if isinstance(arg, (list, tuple)) else [arg])
        x = node.args[0]
        product: ast.expr = ast.BinOp(ast.Constant(16), ast.Mult(), _method(self.ref(x), "numel"))
        values: dict[int, None] = {}
        for size in sizes:
            if type(size) is int and size >= -1:
                if size not in (-1, 1):
                    product = ast.BinOp(product, ast.Mult(), ast.Constant(size))
            elif isinstance(size, Ref) and kinds.get(size.id) == "int":
                values[size.id] = None
                product = ast.BinOp(product, ast.Mult(), self.ref(size))
            else:
                return call
        self.helper("_type")
        plain = _call("_type", self.ref(x))
        tests: list[ast.expr] = [ast.Compare(plain, [ast.In()], [self.helper("_PLAIN_TENSORS")])]
        tests += [
            ast.Compare(_call("_type", self.ref(Ref(v))), [ast.Is()], [self.helper("_int")])
            for v in values
            if v not in self.python_ints
        ]
        tests += [ast.Compare(self.ref(Ref(v)), [ast.GtE()], [ast.Constant(0)]) for v in values]
        tests.append(ast.Compare(product, [ast.LtE()], [ast.Constant(checked_ops.ALLOC_BYTES)]))
        args, kwargs = self.arguments(node)
        kernel = self.bind(_op_prefix(node.op), support.default_callable(node.op))
        return ast.IfExp(ast.BoolOp(ast.And(), tests), ast.Call(kernel, args, kwargs), call)

    def unless_long_range(self, node: Node, call: ast.expr) -> ast.expr:
        """``call`` (an ``arange`` whose ends are values, through ``checked_ops.sized_guard``),
        or, for ``arange(n)`` and ``arange(a, b)`` with ints and no other number (a
        mixture of experts' routing and positions: ``arange(x.shape[0])``), the kernel
        itself when the range's length times 16 bytes is within the allocation limit: the
        guard's own reading of that form (``checked_ops._range_numel``) without its two
        Python frames. A range that runs backwards passes the test, as the guard counts it
        empty; the kernel refuses it either way. Each value is tested to be a Python int
        first, as in :meth:`unless_large`."""
        kinds = self.kinds()
        ends = node.args
        if not 1 <= len(ends) <= 2 or not _RANGE_KEYWORDS.issuperset(node.kwargs):
            return call
        ints = (type(e) is int or isinstance(e, Ref) and kinds.get(e.id) == "int" for e in ends)
        if not all(ints):
            return call
        length = self.literal(ends[0])
        if len(ends) == 2:
            length = ast.BinOp(self.literal(ends[1]), ast.Sub(), length)
        values = dict.fromkeys(
            e.id for e in ends if isinstance(e, Ref) and e.id not in self.python_ints
        )
        tests: list[ast.expr] = [
            ast.Compare(_call("_type", self.ref(Ref(v))), [ast.Is()], [self.helper("_int")])
            for v in values
        ]
        if tests:
            self.helper("_type")
        product = ast.BinOp(ast.Constant(16), ast.Mult(), length)
        tests.append(ast.Compare(product, [ast.LtE()], [ast.Constant(checked_ops.ALLOC_BYTES)]))
        test = tests[0] if len(tests) == 1 else ast.BoolOp(ast.And(), tests)
        args, kwargs = self.arguments(node)
        kernel = self.bind(_op_prefix(node.op), support.default_callable(node.op))
        return ast.IfExp(test, ast.Call(kernel, args, kwargs), call)

    def scalar_as_tensor(self, node: Node, args: list[ast.expr]) -> list[ast.expr]:
        """``args`` with a number literal passed as a 0-dim tensor made once, where that
        gives the same result (runtime/scalars.py)."""
        found = scalars.tensor_for(node, self.dtype_of)
        if found is None:
            return args
        tensor, dtype = found
        # One tensor per number and dtype for the whole function (ops read it, none
        # writes it or returns it: scalars.OPS), so each is one local, not one per node
        # (a transformer's ``+ eps`` and ``* 0.5`` in every layer).
        scalar = node.args[1]
        tensor = self._scalars.setdefault((type(scalar), repr(scalar), dtype), tensor)
        self.plain_read = True
        names = (self.helper("_type"), self.helper("_Tensor"))
        constant = self.constant(tensor)
        return [args[0], scalars.operand(args[0], constant, self.constant(dtype), args[1], names)]

    def dtype_of(self, value_id: int) -> str | None:
        """The traced dtype name of a value of the graph."""
        if self._dtypes is None:
            self._dtypes = {v.id: v.dtype for v in self.graph.inputs}
            self._dtypes.update({v.id: v.dtype for n in self.graph.nodes for v in n.outputs})
        return self._dtypes.get(value_id)

    def _spreads(self, node: Node) -> bool:
        """Whether ``node`` is a method of :data:`_SPREAD` given one literal tuple or list
        of integers (literals or values of kind ``int``), at least one."""
        if node.op not in _SPREAD or node.kwargs or len(node.args) != 2:
            return False
        sizes = node.args[1]
        if not isinstance(sizes, (tuple, list)) or not sizes:
            return False
        kinds = self.kinds()
        return all(
            type(e) is int or (isinstance(e, Ref) and kinds.get(e.id) == "int") for e in sizes
        )

    def state_reads(self) -> dict[int, str]:
        """``value id -> state name`` of the graph's state reads, made when first needed."""
        if self._state_reads is None:
            self._state_reads = state_reads(self.graph)
        return self._state_reads

    def kinds(self) -> dict[int, str]:
        """Value id -> kind for the graph's values (made when first needed)."""
        if self._kinds is None:
            self._kinds = {v.id: v.kind for v in self.graph.inputs}
            self._kinds.update({v.id: v.kind for n in self.graph.nodes for v in n.outputs})
        return self._kinds

    def targets(self, node: Node) -> ast.expr:
        """The assignment target for a node's result, following its out_spec."""
        outputs = iter(node.outputs)

        def leaf() -> ast.expr:
            return ast.Name(self.define(next(outputs)), ast.Store())

        def group(_spec, children) -> ast.expr:
            return ast.Tuple(children, ast.Store()) if children else ast.Name("_", ast.Store())

        return pytree.fold_spec(
            node.out_spec, leaf, group, lambda _spec: ast.Name("_", ast.Store())
        )

    def structure(self, spec: dict, leaves) -> ast.expr:
        """The expression that rebuilds a result from its leaves (pytree spec)."""

        def group(spec, items) -> ast.expr:
            kind = spec["t"]
            if kind == "list":
                return ast.List(items, ast.Load())
            if kind == "dict":
                return ast.Dict([self.literal(k) for k in spec["keys"]], items)
            if kind == "namedtuple":
                cls = pytree.class_of(spec)
                return ast.Call(self.bind("NT", cls), items, [])
            if spec.get("size") is True:  # an output that was a torch.Size
                return ast.Call(self.bind("Size", torch.Size), [ast.Tuple(items, ast.Load())], [])
            return ast.Tuple(items, ast.Load())

        def empty(spec) -> ast.expr:
            return self.literal(spec["v"]) if spec["t"] == "const" else ast.Constant(None)

        return pytree.fold_spec(spec, lambda: self.literal(next(leaves)), group, empty)

    # -- statements -------------------------------------------------------------------------

    def emit(self, stmt: ast.stmt, note: str | None = None, loc: str | None = None) -> None:
        self.body.append((stmt, note, loc))

    def input_checks(self, params: list[str]) -> None:
        """Rank and dtype kind of each input, inline (the interpreter's check_inputs)."""
        self.globals["_graph"] = self.graph
        for index, (value, param) in enumerate(zip(self.graph.inputs, params)):
            rank = len(value.shape or [])
            test: ast.expr = ast.Compare(
                _call("_getattr", _name(param), ast.Constant("ndim"), ast.Constant(None)),
                [ast.NotEq()],
                [ast.Constant(rank)],
            )
            self.helper("_getattr")
            kind = support.kind_of(value.dtype)
            if kind is not None:
                read = _method(self.helper("_KIND"), "get", _attr(_name(param), "dtype"))
                wrong = ast.Compare(read, [ast.NotEq()], [ast.Constant(kind)])
                test = ast.BoolOp(ast.Or(), [test, wrong])
            fail = _call("_bad_input", ast.Constant(index), _name("_graph"), _name(param))
            self.helper("_bad_input")
            self.emit(ast.If(test, [ast.Expr(fail)], []))
        reshaped = support.reshaped_inputs(self.graph)
        if reshaped:  # one tensor passed twice would change shape under both names
            self.globals["_reshaped"] = reshaped
            leaves = ast.Tuple([_name(p) for p in params], ast.Load())
            self.helper("_not_repeated")
            check = _call("_not_repeated", _name("_graph"), leaves, _name("_reshaped"))
            self.emit(ast.Expr(check))

    def node(self, index: int, node: Node) -> None:
        self._where = f"{self.name}: node {index} ({node.op})"
        self._index = index
        if index in self._view_members:  # a tree's nodes run as one call, at its last
            for tree in self._view_calls.get(index, ()):
                self.collapsed(tree)
        elif index in self._repeats:
            if index == self._repeats[index].reshape:  # all three, at the last
                self.repeat_kv(self._repeats[index])
        elif index in self._merged:
            self.reshape_contiguous(node, self.graph.nodes[self._merged[index]])
        elif index in self._merged_away:
            return  # run by the reshape that reads it
        elif index in self._halves:
            if index == self._halves[index].first:  # both slices, at the first of them
                self.split_in_two(self._halves[index])
        elif node.op == "prim.state":
            self.state(node)
        elif node.op == "prim.guard":
            self.guard(node)
        elif isinstance(node, size_checks.SizeCheckNode):
            self.size_checked(node)
        else:
            self.op(node)

    def state(self, node: Node) -> None:
        name = node.args[0] if node.args else None
        slot = self.slots.get(name) if isinstance(name, str) else None
        if slot is None:
            raise ArtifactError(f"{self._where}: reads state {name!r}, which the file lacks")
        owner, key = slot
        if type(owner) is sealed.SealedDict:  # read without breaking its seal
            read = _call("_state_get", self.bind("S", owner), _constant(key))
            self.helper("_state_get")
        else:
            read = ast.Subscript(self.bind("S", owner), _constant(key), ast.Load())
        self.emit(ast.Assign([self.targets(node)], read), comment(name), node.loc)

    def guard(self, node: Node) -> None:
        if not self.guards:
            return
        value = self.literal(node.args[0]) if node.args else ast.Constant(None)
        expect = node.kwargs.get("expect")
        if isinstance(expect, bool):
            test = ast.Compare(value, [ast.IsNot()], [ast.Constant(expect)])
        else:
            test = ast.Compare(value, [ast.NotEq()], [self.literal(expect)])
        line = self.graph.sources.get(node.loc, "") if isinstance(node.loc, str) else ""
        fail = _call(
            "_raise_guard",
            self.bind("G", node),
            self.literal(node.args[0] if node.args else None),
            ast.Constant(line if isinstance(line, str) else ""),
        )
        self.helper("_raise_guard")
        self.emit(ast.If(test, [ast.Expr(fail)], []), "guard", node.loc)

    def matrix_call(self, node: linear_2d.MatrixNode) -> ast.expr:
        """``addmm(bias, x, wt)`` (``mm(x, wt)``) where ``x`` is a plain tensor with two
        dimensions, the weight and bias plain too, in a call without a mode or autocast,
        else ``linear(x, t(wt), bias)``: the linear the node stands for
        (runtime/linear_2d.py)."""
        self.plain_read = True
        x, wt = self.ref, self.ref  # a fresh expression for each use
        bias = [node.bias] if node.bias is not None else []
        fast = self.bind(_op_prefix(node.op), support.default_callable(node.op))
        linear = self.bind(_op_prefix("linear"), support.default_callable("linear"))
        plain = ast.Compare(_call("_type", x(node.input)), [ast.Is()], [self.helper("_Tensor")])
        self.helper("_type")
        matrix = ast.Compare(_attr(x(node.input), "ndim"), [ast.Eq()], [ast.Constant(2)])
        # A weight (or bias) of a tensor subclass may define linear itself: addmm would
        # bypass it. t() of a Parameter is a plain Tensor.
        own = ast.Compare(_call("_type", wt(node.transposed)), [ast.Is()], [_name("_Tensor")])
        tests = [ast.Name(scalars.PLAIN, ast.Load()), plain, matrix, own]
        for b in bias:
            tests.append(
                ast.Compare(
                    _call("_type", self.ref(b)), [ast.In()], [self.helper("_PLAIN_TENSORS")]
                )
            )
        test = ast.BoolOp(ast.And(), tests)
        direct = [*(self.ref(b) for b in bias), x(node.input), wt(node.transposed)]
        # the weight itself (same storage and strides), by a bound op: no method read
        weight = ast.Call(
            self.bind(_op_prefix("t"), support.default_callable("t")), [wt(node.transposed)], []
        )
        traced = [x(node.input), weight, *(self.ref(b) for b in bias)]
        return ast.IfExp(test, ast.Call(fast, direct, []), ast.Call(linear, traced, []))

    def size_checked(self, node: size_checks.SizeCheckNode) -> None:
        """One call that checks a group of guards on values nothing else needs, once per
        key of sizes (runtime/size_checks.py); nothing where guards are off."""
        if not self.guards:
            return
        inner = _KeyedCodeGen(node.checks, self.slots, f"{self.name}_checks", True, self.methods)
        function = compile_function(inner).function
        slots = []
        for name in node.sources:
            slot = self.slots.get(name)
            if slot is None:
                raise ArtifactError(f"{self._where}: reads state {name!r}, which the file lacks")
            slots.append(slot)
        reads = size_checks.reads(self.graph, node)
        guards = sum(1 for n in node.checks.nodes if n.op == "prim.guard")
        runner = size_checks.SizeChecks(function, reads, slots, len(node.checks.nodes), guards)
        call = ast.Call(self.constant(runner), [self.literal(a) for a in node.args], [])
        self.emit(ast.Expr(call), "size checks", node.loc)

    def op(self, node: Node) -> None:
        note = node.op
        if _eval_dropout(node) and self.callable_for(node) is support.default_callable(node.op):
            # dropout(x, p, train=False) is x itself: no call at all
            self.emit(ast.Assign([self.targets(node)], self.literal(node.args[0])), note, node.loc)
            return
        call = self.matrix_call(node) if isinstance(node, linear_2d.MatrixNode) else None
        call = call or self.square_as_product(node, self.unless_identity(node, self.call(node)))
        call = self.group_norm_unchecked(node, call)
        call = self.unless_same_shape(node, call)
        call = self.as_one_view(node, call)
        call = self.weight_in_layout(node, call)
        # A count of results is a guard, also where nothing reads the results (a loop
        # over an empty batch, or one that only counts: runtime/dead_code.py keeps it)
        if dead_code.counts_results(node) and not self.count_is_literal(node):
            count = ast.Constant(len(node.out_spec["c"]))
            call = _call("_check_count", call, count, self.bind("N", node))
            self.helper("_check_count")
            call = self.unbind_kernel(node, call)
        if node.out_spec is None or not node.outputs and node.out_spec.get("t") != "leaf":
            self.emit(ast.Expr(call), note, node.loc)
            return
        self.emit(self.in_place(node, call, self.targets(node)), note, node.loc)

    def weight_in_layout(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for a ``conv2d`` in calls without autograd whose weight is state or
        a value of state alone, the same call passing ``site(x, w) if _plain and type(x)
        is Tensor and not x.is_contiguous() else w`` as its weight: the weight in the
        layout ATen would copy it into on every call, where the input's strides make it
        choose channels-last (runtime/layouts.py). A contiguous input costs the test
        only (one C call); a weight known to be channels-last already (1x1 kernels,
        depthwise) is not tested at all."""
        if node.op != "conv2d" or not self.no_autograd or not self.default_call(node):
            return call
        if not isinstance(call, ast.Call) or len(call.args) < 2 or len(node.args) < 2:
            return call
        x, w = call.args[0], call.args[1]
        weight = node.args[1]
        if not (isinstance(x, ast.Name) and isinstance(w, ast.Name) and isinstance(weight, Ref)):
            return call
        if self._static is None:
            self._static = folding.static_ids(self.graph)
            self._static_shapes = {
                v.id: v.shape for n in self.graph.nodes for v in n.outputs if v.id in self._static
            }
        if weight.id not in self._static:
            return call
        shape = self._static_shapes.get(weight.id)
        known = shape is not None and len(shape) == 4 and all(type(s) is int for s in shape)
        if known and (shape[1] == 1 or shape[2] * shape[3] == 1):
            return call  # contiguous is channels-last too: ATen copies nothing
        self.plain_read = True
        tests = [
            ast.Name(scalars.PLAIN, ast.Load()),
            ast.Compare(_call("_type", _name(x.id)), [ast.Is()], [self.helper("_Tensor")]),
            ast.UnaryOp(ast.Not(), _method(_name(x.id), "is_contiguous")),
        ]
        self.helper("_type")
        site = ast.Call(self.constant(layouts.ChannelsLastWeight()), [_name(x.id), _name(w.id)], [])
        chosen = ast.IfExp(ast.BoolOp(ast.And(), tests), site, _name(w.id))
        return ast.Call(call.func, [call.args[0], chosen, *call.args[2:]], call.keywords)

    def unbind_kernel(self, node: Node, call: ast.expr) -> ast.expr:
        """``call`` (the checked ``unbind`` and its count guard), or for an ``unbind`` of
        ``n`` results along a literal ``d``, the kernel itself where ``x`` is a plain tensor
        with ``n`` along ``d``, outside modes, and ``call`` otherwise (runtime/unbinds.py)."""
        found = unbinds.counted(node) if self.fold and self.default_call(node) else None
        if found is None:
            return call
        x, d = self.literal, found.dim  # a fresh expression for each use
        rank = _attr(x(found.tensor), "ndim")
        has_dim = (
            ast.Compare(rank, [ast.Gt()], [_constant(d)])
            if d >= 0
            else ast.Compare(rank, [ast.GtE()], [_constant(-d)])
        )
        size = ast.Subscript(_attr(x(found.tensor), "shape"), _constant(d), ast.Load())
        tests = [
            ast.Name(scalars.PLAIN, ast.Load()),
            ast.Compare(_call("_type", x(found.tensor)), [ast.Is()], [self.helper("_Tensor")]),
            has_dim,
            ast.Compare(size, [ast.Eq()], [ast.Constant(found.count)]),
        ]
        self.helper("_type")
        self.plain_read = True
        kernel = self.bind(_op_prefix("unbind") + "kernel_", unbinds.KERNEL)
        fast = ast.Call(kernel, [x(found.tensor), _constant(d)], [])
        return ast.IfExp(ast.BoolOp(ast.And(), tests), fast, call)

    def count_is_literal(self, node: Node) -> bool:
        """Whether ``node`` is a ``split_with_sizes`` of the op table's own implementation
        given a literal list of as many sizes as its out_spec has results: it returns
        exactly that many or raises, so the count needs no check (about 0.3 us)."""
        if node.op != "split_with_sizes" or not node.args or not self.default_call(node):
            return False
        sizes = node.args[1] if len(node.args) > 1 else node.kwargs.get("split_sizes")
        return (
            isinstance(sizes, (list, tuple))
            and all(type(s) is int for s in sizes)
            and len(sizes) == len(node.out_spec["c"])
        )

    def output(self) -> None:
        leaves = iter(self.graph.outputs)
        self.emit(ast.Return(self.structure(self.graph.out_spec, leaves)))

    def free(self, value_ids) -> None:
        """``del`` the variables of values past their last use, and give their names back
        for later values: a function has as many locals as values live at once, not one a
        value.

        Note: why names are taken again. CPython reads a local by its index, and one past
        255 takes an ``EXTENDED_ARG`` prefix, an instruction of its own; a transformer's
        forward had 457 locals and ran 1,012 such prefixes a call (Qwen2-MoE), in a frame of
        457 slots. A dead value is marked, so a later read of it through :meth:`ref` fails
        here (ArtifactError) as it failed at the call before (UnboundLocalError), rather than
        reading the value that took its name. Code placed earlier in the body (inference
        mode entered with the inputs, runtime/lean.py) still reads :attr:`names`, where a
        value's name is its own until its last use."""
        found = {v: self.names[v] for v in value_ids if v in self.names}
        kept = self._kept_alive()
        names = sorted({name for v, name in found.items() if v not in kept})
        if names:
            self.emit(ast.Delete([ast.Name(n, ast.Del()) for n in names]))
        for v, name in found.items():
            self._dead.add(v)
            if self._made.get(name) == v:  # a name define() made for this value alone
                del self._made[name]
                self._spare.append(name)

    def _kept_alive(self) -> set[int]:
        """Values whose ``del`` frees nothing (made when first needed): state read from its
        table, which holds it, and Python numbers (:func:`_python_ints`, and the results of
        scalar ops on those and on literal numbers). Their names are still given back, and
        the next value that takes a name drops what it held; a ``del`` is a bytecode of its
        own (hf vit: 93 of 1,078 a call, half of them of such values)."""
        if self._no_del is None:
            found = set(self.python_ints)
            for node in self.graph.nodes:
                if node.op == "prim.state":
                    found.update(v.id for v in node.outputs)
                elif (
                    node.op.startswith("scalar.")
                    and not node.kwargs
                    and len(node.outputs) == 1
                    and all(
                        a.id in found if isinstance(a, Ref) else type(a) in (int, float, bool)
                        for a in node.args
                    )
                ):
                    found.add(node.outputs[0].id)
            self._no_del = found
        return self._no_del

    def build(self) -> ast.FunctionDef:
        """The function's tree (positions are set by :func:`render`)."""
        support.check_graph(self.graph, self.name)
        params = [f"in{i}" for i in range(len(self.graph.inputs))]
        for value, param in zip(self.graph.inputs, params):
            self.names[value.id] = param
        self._defined = len(params)
        self.input_checks(params)
        start = len(self.body)
        blocks: dict[int, memo.MemoBlock] = {}
        if self.fold:  # what nothing needs goes (runtime/dead_code.py), repeats read the
            # first result (runtime/cse.py); runs of ops on sizes move next to their first
            # reader (runtime/memo.py)
            self.graph = size_checks.plan(dead_code.prune(self.graph))
            self.no_autograd = self.common and cse.grad_stays_off(self.graph)
            if self.no_autograd:
                if self.guards:  # a dtype a guard fixes is its literal past the guard
                    self.graph = cse.guarded_dtypes(self.graph)
                self.graph = cse.eliminate(contiguous.read_shapes_before(self.graph))
            # Tensors of the folded part key memos by identity only where folding keeps
            # them (the same objects until the state changes); unfolded, each call makes
            # new ones, which no key would ever match.
            folds = folding.plan(self.graph, self.guards, self.no_autograd) is not None
            self.graph, found = memo.plan(self.graph, folded=folds)
            blocks = {b.start: b for b in found}
        dead_after = last_uses(self.graph)
        self.int_bits = _int_bits(self.graph)
        self.python_ints = _python_ints(self.graph)
        fold = folding.plan(self.graph, self.guards, self.no_autograd) if self.fold else None
        self._fold = fold
        static = set(fold.skip) if fold is not None else set()
        if fold is not None:
            self.folded(fold)
        lean_start = len(self.body)  # the folded values are made in the caller's mode
        if self.fold:
            dead_after = self.plan_views(static, blocks) or dead_after
        if self.no_autograd:
            self.plan_halves(static, blocks)
            self._same_shape = same_shape.candidates(self.graph)
            self.plan_merged(static, blocks)
            dead_after = self.keep_merged_inputs(dead_after)
            dead_after = self.plan_repeats(static, blocks, dead_after)
            self.plan_inplace(static, blocks)
            self.plan_lean(static, blocks)
        if self.fold and self.guards:
            self.plan_unit_products(static, blocks, dead_after)
        stop = 0
        product, product_start = None, 0
        for index, node in enumerate(self.graph.nodes):
            if index in blocks:
                stop = blocks[index].stop
                self.memoised(blocks[index])
                self.free(v for i in range(index, stop) for v in dead_after.get(i, ()))
            if index in static or index < stop:
                continue  # computed by the folded function or a memo
            if index in self._unit_products:
                product, product_start = self._unit_products[index], len(self.body)
            before = len(self.body)
            self.node(index, node)
            if index in self._outside_lean and len(self.body) > before:
                self.outside_lean(before)
            self.free(dead_after.get(index, ()))
            if product is not None and index == product.guard:
                self.unit_product(product, product_start, node)
                product = None
        self._where = f"{self.name}: the outputs"
        if self.lean:
            self.normal_outputs()
        self.output()
        if self.lean:
            self.in_lean(lean_start)
        if self.plain_read:  # once per call, before any op: no mode, no autocast
            # scalars.plain_call written out: three C calls without a Python frame
            self.globals["_function_modes"] = scalars._function_modes
            self.globals["_dispatch_modes"] = scalars._dispatch_modes
            self.globals["_autocast"] = scalars._autocast
            modes = [_call(name) for name in ("_function_modes", "_dispatch_modes", "_autocast")]
            test = ast.UnaryOp(ast.Not(), ast.BoolOp(ast.Or(), modes))
            plain = ast.Assign([ast.Name(scalars.PLAIN, ast.Store())], test)
            self.body.insert(start, (plain, None, None))
        if any(n.op == "set_grad_enabled" for n in self.graph.nodes):
            self.restore_grad_mode(start)
        return ast.FunctionDef(
            "traced", self.signature(params), [s for s, _, _ in self.body], [], None
        )

    def signature(self, params: list[str]) -> ast.arguments:
        """The inputs, positional only, then every object the code names (ops, state
        tables, constants, guards, helpers) as a keyword-only parameter whose default is
        that object: the body reads each as a local (``LOAD_FAST``), not through the
        globals dict on every op. Callers pass the inputs only.

        A guard's record (``G``, read only where the guard fails) stays a global: the
        values' own locals come after these parameters, and an index past 255 costs an
        ``EXTENDED_ARG`` prefix on every read (Bailing-hybrid's 46 guards put all its
        values' locals past it)."""
        bound = sorted(
            name for name in self.globals if name != "__builtins__" and not _GUARD_RECORD(name)
        )
        return ast.arguments(
            posonlyargs=[ast.arg(p) for p in params],
            args=[],
            vararg=None,
            kwonlyargs=[ast.arg(name) for name in bound],
            kw_defaults=[_name(name) for name in bound],
            kwarg=None,
            defaults=[],
        )

    def folded(self, fold: folding.FoldPlan) -> None:
        """One call that gives every static value the rest of the graph reads, computed
        by a function of its own and cached while the state is the same."""
        self._where = f"{self.name}: the folded values"
        sub = folding.subgraph(self.graph, fold)
        inner = CodeGen(sub, self.slots, f"{self.name}_folded", self.guards, self.methods)
        function = compile_function(inner).function
        slots = []
        for name in fold.sources:
            slot = self.slots.get(name) if isinstance(name, str) else None
            if slot is None:
                raise ArtifactError(f"{self._where}: reads state {name!r}, which the file lacks")
            slots.append(slot)
        slots += [self.slots[name] for name in folding.counters_of(fold.sources, self.slots)]
        ops = sum(1 for i in fold.nodes if self.graph.nodes[i].op not in _NOT_OPS)
        guards = sum(1 for i in fold.nodes if self.graph.nodes[i].op == "prim.guard")
        if self.frozen:
            runner = folding.FixedFolded(function, slots, len(fold.boundary), ops, guards)
        elif self.seal is not None and self.seal.intact:
            runner = folding.SealedFolded(
                function, slots, len(fold.boundary), ops, guards, seal=self.seal
            )
        else:
            runner = folding.Folded(function, slots, len(fold.boundary), ops, guards)
        values = {v.id: v for n in self.graph.nodes for v in n.outputs}
        targets = [ast.Name(self.define(values[v]), ast.Store()) for v in fold.boundary]
        call = ast.Call(self.constant(runner), [], [])
        if not targets:  # only guards on state: checked when the state changes
            self.emit(ast.Expr(call), "folded guards")
            return
        # and, last, whether the tensors among them are plain (folding.with_their_types)
        targets.append(ast.Name(FOLDED_PLAIN, ast.Store()))
        self.emit(ast.Assign([ast.Tuple(targets, ast.Store())], call), "folded")

    def memoised(self, block: memo.MemoBlock) -> None:
        """One call that gives a block's values for the current sizes, computed by a
        function of its own on the first call with those sizes (runtime/memo.py)."""
        self._where = f"{self.name}: the values memoised by size"
        sub = memo.subgraph(self.graph, block)
        inner = _KeyedCodeGen(sub, self.slots, f"{self.name}_memo", self.guards, self.methods)
        function = compile_function(inner).function
        ops = sum(1 for n in sub.nodes if n.op.split(".")[0] not in ("prim", "scalar"))
        guards = sum(1 for n in sub.nodes if n.op == "prim.guard")
        kinds = {v.id: v.kind for v in sub.inputs}
        meta = tuple(i for i, k in enumerate(block.keys) if k in block.meta)
        like = tuple(i for i, k in enumerate(block.keys) if k in block.like)
        state = tuple(
            i for i, k in enumerate(block.keys) if kinds.get(k) == "Tensor" and i not in meta
        )
        # Running statistics among the keys are written without a new version: their
        # module's counter joins the key, as for a folded value (runtime/folding.py).
        read = self.state_reads()
        names = [read[block.keys[i]] for i in state if block.keys[i] in read]
        counters = tuple(self.slots[n] for n in folding.counters_of(names, self.slots))
        runner = memo.Memo(function, len(block.boundary), ops, state, guards, counters, meta, like)
        keys = [self.ref(Ref(k)) for k in block.keys]
        values = {v.id: v for n in sub.nodes for v in n.outputs}
        targets = [ast.Name(self.define(values[v]), ast.Store()) for v in block.boundary]
        call = ast.Call(self.constant(runner), keys, [])
        self.emit(ast.Assign([ast.Tuple(targets, ast.Store())], call), "memoised by size")

    def plan_views(self, static: set[int], blocks: dict) -> dict[int, list[int]] | None:
        """Find the trees of view ops to run as one ``as_strided`` per result and size
        key (runtime/views.py), outside folded and memoised nodes; the values' last uses
        in the code that runs them, or None where there are none."""
        skip = set(static) | {i for b in blocks.values() for i in range(b.start, b.stop)}
        trees = views.plan(self.graph, skip)
        if not trees:
            return None
        self._view_members = {i for tree in trees for i in tree.members}
        for tree in trees:
            self._view_calls.setdefault(tree.at, []).append(tree)
        return last_uses(views.surrogate(self.graph, trees))

    def collapsed(self, tree: views.ViewTree) -> None:
        """One call that gives a tree's results (and the sizes read from inside it),
        as ``as_strided`` of its base after the first call with a key (runtime/views.py)."""
        self._where = f"{self.name}: the views of node {tree.at}"
        sub = views.subgraph(self.graph, tree)
        inner = _KeyedCodeGen(sub, self.slots, f"{self.name}_views", self.guards, self.methods)
        function = compile_function(inner).function
        runner = views.Views(function, len(tree.results), tree.ops, tree.index_keys)
        values = {v.id: v for n in sub.nodes for v in n.outputs}
        targets = [ast.Name(self.define(values[v]), ast.Store()) for v in tree.results + tree.sizes]
        reads = [self.ref(Ref(k)) for k in [tree.base, *tree.keys]]
        # The bound method is the constant: the code reads no attribute but its tensors'.
        call = ast.Call(self.constant(runner.run), reads, [])
        note = comment("views: " + ", ".join(tree.ops))
        self.emit(ast.Assign([ast.Tuple(targets, ast.Store())], call), note)

    def unless_identity(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for a conversion of a tensor to the dtype it may already have,
        the tensor itself when it has it and ``call`` otherwise (runtime/identity.py)."""
        if not self.fold or node.op not in identity.CONVERSIONS:
            return call
        if self.callable_for(node) is not support.default_callable(node.op):
            return call
        found = identity.dtype_conversion(node, self.kinds())
        if found is None:
            return self.unless_same_device(node, call)
        tensor, dtype = found
        plain = ast.Compare(_call("_type", self.literal(tensor)), [ast.Is()], [_name("_Tensor")])
        same = ast.Compare(_attr(self.literal(tensor), "dtype"), [ast.Is()], [self.literal(dtype)])
        self.helper("_type")
        self.helper("_Tensor")
        return ast.IfExp(ast.BoolOp(ast.And(), [plain, same]), self.literal(tensor), call)

    def unless_same_device(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for ``x.to(device)`` (with a dtype, maybe), ``x`` itself when it is
        on that device (with that dtype) and ``call`` otherwise (runtime/identity.py)."""
        found = identity.device_conversion(node, self.kinds())
        if found is None:
            return call
        tensor, device, dtype = found
        x = self.literal  # a fresh expression for each use
        tests = [ast.Compare(_call("_type", x(tensor)), [ast.Is()], [self.helper("_Tensor")])]
        if isinstance(device, Ref):  # a value of the graph: a device, or the call decides
            kind = _call("_type", x(device))
            tests.append(ast.Compare(kind, [ast.Is()], [self.constant(torch.device)]))
        tests.append(ast.Compare(_attr(x(tensor), "device"), [ast.Eq()], [x(device)]))
        if dtype is not None:
            tests.append(ast.Compare(_attr(x(tensor), "dtype"), [ast.Is()], [x(dtype)]))
        self.helper("_type")
        return ast.IfExp(ast.BoolOp(ast.And(), tests), x(tensor), call)

    def plan_merged(self, static: set[int], blocks: dict) -> None:
        """Find the ``contiguous`` that their reshape runs (runtime/contiguous.py)."""
        elsewhere = set(static) | self._view_members | set(self._halves)
        for block in blocks.values():
            elsewhere.update(range(block.start, block.stop))
        for reshape, made in contiguous.pairs(self.graph).items():
            pair = (self.graph.nodes[reshape], self.graph.nodes[made])
            if reshape in elsewhere or made in elsewhere:
                continue
            if any(self.callable_for(n) is not support.default_callable(n.op) for n in pair):
                continue
            self._merged[reshape] = made
        self._merged_away = set(self._merged.values())

    def plan_lean(self, static: set[int], blocks: dict) -> None:
        """Whether calls run in inference mode, and the nodes that run outside it: those
        whose results an output may share memory with (runtime/lean.py); a node that
        writes into its dead operand (runtime/inplace.py) shares its operand's memory, and
        runs outside with the operand's maker where that memory reaches an output (as
        recorded, where it may not run in place, it makes new memory)."""
        self.lean = lean.applies(self.graph)
        if not self.lean:
            return
        # Folded and memoised values never reach an output nor a write (their plans
        # refuse it): made elsewhere, outside inference mode (runtime/folding.py).
        elsewhere = set(static)
        for block in blocks.values():
            elsewhere.update(range(block.start, block.stop))
        self._lean_plan = lean.plan(self.graph, self._inplace)
        if self._lean_plan is None:
            self.lean = False
            return
        outside = self._lean_plan.outside - elsewhere
        if not lean.pays(self.graph, elsewhere | outside):
            self.lean = False
            return
        self._outside_lean = outside
        # A tree of views runs as one call where it stands (runtime/views.py), which may
        # be a read of a size: outside, where any of its views is.
        for trees in self._view_calls.values():
            for tree in trees:
                if not self._outside_lean.isdisjoint(tree.members):
                    self._outside_lean.add(tree.at)

    def outside_lean(self, before: int) -> None:
        """The statements from ``before`` on run in the caller's mode: inference mode is
        left before them (or not entered again since the last such run, where only
        ``del`` statements came between) and entered again after them."""
        between = self.body[self._reentered + 1 : before] if self._reentered >= 0 else None
        if between is not None and all(isinstance(s, ast.Delete) for s, _, _ in between):
            del self.body[self._reentered]
            before -= 1
        else:
            self.body.insert(before, (_set_lean(ast.Constant(None)), "leave inference mode", None))
        enter = _call("_InferenceMode", ast.Constant(True))
        again = ast.If(_name("_leaned"), [_set_lean(enter)], [])
        self.helper("_InferenceMode")
        self.emit(again, "inference mode again")
        self._reentered = len(self.body) - 1

    def normal_outputs(self) -> None:
        """An output that came out an inference tensor all the same is copied into a normal
        one (runtime/lean.py); only outputs that share no memory with an input or state
        are tested (a view of an inference tensor in state is one in eager too)."""
        made = self._lean_plan.checked
        names = sorted({self.names[v] for v in made if v in self.names})
        if not names:
            return
        tests = [_method(_name(n), "is_inference") for n in names]
        made_inside = tests[0] if len(tests) == 1 else ast.BoolOp(ast.Or(), tests)
        test = ast.BoolOp(ast.And(), [_name("_leaned"), made_inside])
        targets = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        copies = _call("_normal_copies", *(_name(n) for n in names))
        self.helper("_normal_copies")
        self.emit(ast.If(test, [ast.Assign([targets], copies)], []), "normal tensors out")

    def in_lean(self, start: int) -> None:
        """The body from ``start`` runs in inference mode where :func:`lean.enter` allows,
        left on any exit."""
        inner = self.body[start:]
        tensors = [_name(self.names[v.id]) for v in self.graph.inputs if v.kind == "Tensor"]
        names = self.state_read_inside()
        slots = [self.slots[name] for name in names if name in self.slots]
        plain = lean.all_plain(slots)
        if self.frozen and plain:
            state = self.constant(lean.FixedTypes(slots))
        elif self.seal is not None and self.seal.intact and plain:
            state = self.constant(lean.SealedTypes(slots, self.seal))
        else:
            state = self.constant(lean.StateTypes(slots))
        enter = _set_lean(_call("_enter_lean", state, *tensors))
        if self.folded_tensors():  # their types, known when they were made
            enter.value.keywords = [ast.keyword("folded_plain", _name(FOLDED_PLAIN))]
        self.helper("_enter_lean")
        leaned = ast.Assign(
            [ast.Name("_leaned", ast.Store())],
            ast.Compare(_name("_lean"), [ast.IsNot()], [ast.Constant(None)]),
        )
        wrapped = ast.Try([s for s, _, _ in inner], [], [], [_set_lean(ast.Constant(None))])
        wrapped._tb_body = inner  # keeps the comments of the wrapped statements
        self.body[start:] = [
            (enter, "inference mode inside (runtime/lean.py)", None),
            (leaned, None, None),
            (wrapped, None, None),
        ]

    def state_read_inside(self) -> dict[str, None]:
        """The names of the state that code in inference mode may run ops on, each once,
        in order: the reads the body makes (not those only the folded function makes: it
        runs before, in the caller's mode, and :meth:`folded_tensors` are checked instead)
        and the state that size checks read for themselves (runtime/size_checks.py)."""
        skipped = set(self._fold.skip) if self._fold is not None else set()
        names: dict[str, None] = {}
        for index, node in enumerate(self.graph.nodes):
            if isinstance(node, size_checks.SizeCheckNode):
                names.update(dict.fromkeys(s for s in node.sources if isinstance(s, str)))
            elif node.op == "prim.state" and index not in skipped and _names_state(node):
                names[node.args[0]] = None
        return names

    def folded_tensors(self) -> list[ast.expr]:
        """The tensors of the folded function's results, by their names in the body."""
        if self._fold is None:
            return []
        kinds = self.kinds()
        return [
            _name(self.names[v])
            for v in self._fold.boundary
            if kinds.get(v) == "Tensor" and v in self.names
        ]

    def plan_inplace(self, static: set[int], blocks: dict) -> None:
        """Find the elementwise ops that may write into their dead first operand
        (runtime/inplace.py): among the nodes that run as their own statement, with
        the op table's own implementation."""
        elsewhere = set(static) | self._view_members | set(self._halves)
        elsewhere |= set(self._merged) | self._merged_away | set(self._repeats)
        for block in blocks.values():
            elsewhere.update(range(block.start, block.stop))
        for index, node in enumerate(self.graph.nodes):
            if node.op in inplace.OPS and not self.default_call(node):
                elsewhere.add(index)
        passes_on = lambda node: _eval_dropout(node) and self.default_call(node)  # noqa: E731
        self._inplace = inplace.plan(self.graph, elsewhere.__contains__, passes_on)

    def in_place(self, node: Node, call: ast.expr, target: ast.expr) -> ast.stmt:
        """``target = call``, or where ``node`` may write into its first operand
        (runtime/inplace.py), the in-place op when the operands are plain tensors of
        the traced dtype outside any mode, and ``call`` otherwise or where the in-place
        op refuses the operands."""
        plain = ast.Assign([target], call)
        dtype = self._inplace.get(self._index)
        if dtype is None or not isinstance(call, ast.Call):
            return plain
        if node.op in inplace.BINARY and len(call.args) != len(node.args):
            return plain
        x = self.literal  # a fresh expression for each use
        first = node.args[0]
        tests = [
            ast.Name(scalars.PLAIN, ast.Load()),
            ast.Compare(_call("_type", x(first)), [ast.Is()], [self.helper("_Tensor")]),
            ast.Compare(_attr(x(first), "dtype"), [ast.Is()], [self.constant(_DTYPE[dtype])]),
        ]
        self.helper("_type")
        self.plain_read = True
        other = node.args[1] if len(node.args) > 1 else None
        guarded = isinstance(other, Ref)  # a tensor may broadcast the result past the operand
        if guarded:
            kind = {"Tensor": "_PLAIN_TENSORS", "int": "_int", "float": "_float"}.get(
                self.kinds().get(other.id)
            )
            if kind is None:
                return plain
            test_type = ast.In() if kind == "_PLAIN_TENSORS" else ast.Is()
            tests.append(ast.Compare(_call("_type", x(other)), [test_type], [self.helper(kind)]))
            if kind == "_PLAIN_TENSORS":  # a wider dtype would widen the result
                same = ast.Compare(
                    _attr(x(other), "dtype"), [ast.Is()], [self.constant(_DTYPE[dtype])]
                )
                tests.append(same)
        elif other is not None and type(other) not in (int, float):
            return plain  # a literal bool or complex: promotes or differs, as recorded
        table = inplace.UNARY if node.op in inplace.UNARY else inplace.BINARY
        fn = self.bind(_op_prefix(node.op) + "inplace_", table[node.op])
        test = ast.BoolOp(ast.And(), tests)
        args = [_given(arg, test) for arg in call.args]
        fast = ast.Call(fn, copy.deepcopy(args), copy.deepcopy(call.keywords))
        chosen = ast.Assign([target], ast.IfExp(test, fast, call))
        if not guarded:
            return chosen
        refused = ast.ExceptHandler(
            self.helper("_RuntimeError"),
            None,
            [ast.Assign([copy.deepcopy(target)], copy.deepcopy(call))],
        )
        return ast.Try([chosen], [refused], [], [])

    def plan_repeats(self, static: set[int], blocks: dict, dead_after: dict) -> dict:
        """Find the ``repeat_kv`` runs (runtime/repeats.py); ``dead_after`` with their
        input alive up to the reshape and their inner values freed inside the code."""
        elsewhere = set(static) | self._view_members | set(self._halves)
        elsewhere |= set(self._merged) | self._merged_away
        for block in blocks.values():
            elsewhere.update(range(block.start, block.stop))
        dead_after = dict(dead_after)
        for run in repeats.find(self.graph, elsewhere.__contains__):
            nodes = [self.graph.nodes[i] for i in (run.index, run.reshape)]
            if any(self.callable_for(n) is not support.default_callable(n.op) for n in nodes):
                continue
            expand = self.graph.nodes[run.expand]  # its size check stays (checked_ops)
            if getattr(self.callable_for(expand), "__name__", "") != "sized_Tensor_expand":
                continue
            first = self.graph.nodes[run.index]
            inner = {first.outputs[0].id, expand.outputs[0].id}
            for index in range(run.index, run.reshape + 1):
                if index in dead_after:
                    dead_after[index] = [v for v in dead_after[index] if v not in inner]
            # what the three calls read lives up to the reshape, where they all run
            read = {r.id for n in (first, expand) for r in refs_in((n.args, n.kwargs))}
            for index in range(run.index, run.reshape):
                late = [v for v in dead_after.get(index, ()) if v in read]
                if late:
                    dead_after[index] = [v for v in dead_after[index] if v not in read]
                    dead_after[run.reshape] = [*dead_after.get(run.reshape, ()), *late]
            for index in (run.index, run.expand, run.reshape):
                self._repeats[index] = run
        return dead_after

    def repeat_kv(self, run: repeats.Repeat) -> None:
        """``r = repeat_interleave(x, n, 1)`` where the three calls would copy, the three
        calls otherwise (runtime/repeats.py)."""
        index, expand, reshape = (self.graph.nodes[i] for i in (run.index, run.expand, run.reshape))
        slow = []
        for node in (index, expand):
            slow.append(ast.Assign([self.targets(node)], self.call(node)))
        call = self.call(reshape)
        inner = [self.literal(Ref(n.outputs[0].id)) for n in (index, expand)]
        slow += [
            ast.Assign([self.targets(reshape)], call),
            ast.Delete([ast.Name(n.id, ast.Del()) for n in inner]),
        ]
        x = self.literal  # a fresh expression for each use
        b, heads, s, d = run.sizes
        times = ast.Constant(run.times)
        stride = ast.Call(_attr(x(run.tensor), "stride"), [ast.Constant(1)], [])
        tests = [
            ast.Name(scalars.PLAIN, ast.Load()),
            ast.Compare(_call("_type", x(run.tensor)), [ast.Is()], [self.helper("_Tensor")]),
            ast.Compare(x(heads), [ast.Gt()], [times]),
            x(b),
            x(s),
            x(d),
            stride,
            ast.Compare(  # what the expand's check allows, else the checked calls
                ast.BinOp(
                    ast.BinOp(ast.BinOp(x(b), ast.Mult(), x(heads)), ast.Mult(), x(s)),
                    ast.Mult(),
                    x(d),
                ),
                [ast.LtE()],
                [ast.Constant(checked_ops.ALLOC_BYTES // 16)],
            ),
        ]
        self.helper("_type")
        self.plain_read = True
        fn = self.bind(_op_prefix("repeat_interleave"), torch.repeat_interleave)
        target = self.literal(Ref(reshape.outputs[0].id))
        fast = [
            ast.Assign(
                [ast.Name(target.id, ast.Store())],
                ast.Call(fn, [x(run.tensor), times, ast.Constant(1)], []),
            )
        ]
        note = "getitem, Tensor.expand, Tensor.reshape: repeat_interleave"
        self.emit(ast.If(ast.BoolOp(ast.And(), tests), fast, slow), note, reshape.loc)

    def keep_merged_inputs(self, dead_after: dict) -> dict:
        """``dead_after`` with the input of each merged ``contiguous`` alive up to the
        reshape that now reads it."""
        dead_after = dict(dead_after)
        for reshape, made in self._merged.items():
            tensor = self.graph.nodes[made].args[0].id
            for index in range(made, reshape):
                if tensor in dead_after.get(index, ()):
                    dead_after[index] = [v for v in dead_after[index] if v != tensor]
                    dead_after[reshape] = [*dead_after.get(reshape, ()), tensor]
        return dead_after

    def reshape_contiguous(self, node: Node, made: Node) -> None:
        """``r = reshape(x, ...)``, copied where not contiguous, for a plain tensor, and
        ``r = view(contiguous(x), ...)`` otherwise (runtime/contiguous.py)."""
        x = made.args[0]
        both = ast.Call(
            self.bind(_op_prefix(made.op), support.default_callable(made.op)),
            [self.literal(x)],
            [],
        )
        self.names[made.outputs[0].id] = "_contiguous"  # a placeholder, replaced below
        before = self.call(node)  # the reshape or view of the contiguous, as traced
        del self.names[made.outputs[0].id]
        before = _replace_name(before, "_contiguous", both)
        alone = Node("Tensor.reshape", [x, *node.args[1:]], {}, node.outputs, node.out_spec)
        reshape = self.call(alone)
        target = self.targets(node)
        result = ast.Name(target.id, ast.Load())
        copy = ast.Call(
            self.bind(_op_prefix(made.op), support.default_callable(made.op)), [result], []
        )
        check = ast.Call(_attr(ast.Name(target.id, ast.Load()), "is_contiguous"), [], [])
        fast = [
            ast.Assign([ast.Name(target.id, ast.Store())], reshape),
            ast.Assign([ast.Name(target.id, ast.Store())], ast.IfExp(check, result, copy)),
        ]
        plain = ast.Compare(_call("_type", self.literal(x)), [ast.Is()], [self.helper("_Tensor")])
        self.helper("_type")
        self.plain_read = True
        test = ast.BoolOp(ast.And(), [ast.Name(scalars.PLAIN, ast.Load()), plain])
        slow = [ast.Assign([ast.Name(target.id, ast.Store())], before)]
        note = f"{made.op}, {node.op}: one reshape"
        self.emit(ast.If(test, fast, slow), note, node.loc)

    def plan_halves(self, static: set[int], blocks: dict) -> None:
        """Find the pairs of slices that one ``split_with_sizes`` runs (runtime/halves.py)."""
        elsewhere = set(static) | self._view_members
        for block in blocks.values():
            elsewhere.update(range(block.start, block.stop))
        for pair in halves.find(self.graph, elsewhere.__contains__):
            low, high = self.graph.nodes[pair.low], self.graph.nodes[pair.high]
            if any(self.callable_for(n) is not support.default_callable(n.op) for n in (low, high)):
                continue
            self._halves[pair.low] = self._halves[pair.high] = pair

    def split_in_two(self, pair: halves.Halves) -> None:
        """``low, high = split_with_sizes(x, [h, x.shape[d] - h], d)`` for a plain tensor,
        the two slices otherwise (runtime/halves.py)."""
        low, high = self.graph.nodes[pair.low], self.graph.nodes[pair.high]
        slices = ast.Tuple([self.call(low), self.call(high)], ast.Load())
        x, cut, dim = self.literal(pair.tensor), self.literal(pair.cut), ast.Constant(pair.dim)
        size = ast.Subscript(_attr(x, "shape"), ast.Constant(pair.dim), ast.Load())
        sizes = ast.List([cut, ast.BinOp(size, ast.Sub(), self.literal(pair.cut))], ast.Load())
        split = self.bind(_op_prefix("split_with_sizes"), torch.split_with_sizes)
        both = ast.Call(split, [self.literal(pair.tensor), sizes, dim], [])
        self.plain_read = True
        plain = ast.Compare(
            _call("_type", self.literal(pair.tensor)), [ast.Is()], [self.helper("_Tensor")]
        )
        self.helper("_type")
        test = ast.BoolOp(ast.And(), [ast.Name(scalars.PLAIN, ast.Load()), plain])
        self._where = f"{self.name}: nodes {pair.low} and {pair.high} (getitem)"
        targets = ast.Tuple([self.targets(low), self.targets(high)], ast.Store())
        note = "getitem, getitem: split_with_sizes"
        self.emit(ast.Assign([targets], ast.IfExp(test, both, slices)), note, low.loc)

    def unless_same_shape(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for a reshape or view to the shape its tensor may already have,
        the tensor itself when it has it and ``call`` otherwise (runtime/same_shape.py)."""
        if node.op not in same_shape.OPS or self._index not in self._same_shape:
            return call
        if self.callable_for(node) is not support.default_callable(node.op):
            return call
        sizes = same_shape.sizes_of(node)
        kinds = self.kinds()
        if sizes is None or any(isinstance(s, Ref) and kinds.get(s.id) != "int" for s in sizes):
            return call
        tensor = node.args[0]
        x = self.literal  # a fresh expression for each use
        wanted = []
        for dim, size in enumerate(sizes):
            if type(size) is int and size == -1:  # the size it would be inferred as
                shape = _attr(x(tensor), "shape")
                wanted.append(ast.Subscript(shape, ast.Constant(dim), ast.Load()))
            else:
                wanted.append(x(size))
        tests = [
            ast.Name(scalars.PLAIN, ast.Load()),
            ast.Compare(_call("_type", x(tensor)), [ast.Is()], [self.helper("_Tensor")]),
            ast.Compare(_attr(x(tensor), "shape"), [ast.Eq()], [ast.Tuple(wanted, ast.Load())]),
        ]
        if -1 in [s for s in sizes if type(s) is int]:  # no 0 beside it: -1 is then inferred
            tests += [x(s) for s in sizes if isinstance(s, Ref)]
        self.helper("_type")
        self.plain_read = True
        return ast.IfExp(ast.BoolOp(ast.And(), tests), x(tensor), call)

    def as_one_view(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for a ``getitem`` whose index runs one ``select`` or ``unsqueeze``,
        in a call without autograd, that op for a plain tensor and ``call`` otherwise
        (runtime/basic_index.py)."""
        if not self.no_autograd or node.op != "getitem":
            return call
        if self.callable_for(node) is not support.default_callable(node.op):
            return call
        found = basic_index.single_view(node, self.kinds())
        if found is None:
            return call
        x = self.literal  # a fresh expression for each use
        fn = self.bind(_op_prefix(found.op), support.default_callable(found.op))
        extra = [] if found.op == "unsqueeze" else [x(found.index)]
        view = ast.Call(fn, [x(found.tensor), _constant(found.dim), *extra], [])
        self.plain_read = True
        plain = ast.Compare(_call("_type", x(found.tensor)), [ast.Is()], [self.helper("_Tensor")])
        self.helper("_type")
        tests = [ast.Name(scalars.PLAIN, ast.Load()), plain]
        # A file may declare a bool an int (x[True] adds a dimension): unless it is a size.
        if isinstance(found.index, Ref) and found.index.id not in self.python_ints:
            tests.append(
                ast.Compare(_call("_type", x(found.index)), [ast.Is()], [self.helper("_int")])
            )
        return ast.IfExp(ast.BoolOp(ast.And(), tests), view, call)

    def square_as_product(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for ``pow(x, 2)`` in a call without autograd, ``mul(x, x)`` where
        ``x`` is a plain float32/float64 tensor and ``call`` otherwise (runtime/squares.py)."""
        if not self.no_autograd or node.op not in squares.OPS:
            return call
        if self.callable_for(node) is not support.default_callable(node.op):
            return call
        found = squares.squared(node, self.dtype_of)
        if found is None:
            return call
        tensor, dtype = found
        self.plain_read = True
        x = self.literal  # a fresh expression for each use
        plain = ast.Compare(_call("_type", x(tensor)), [ast.Is()], [self.helper("_Tensor")])
        same = ast.Compare(_attr(x(tensor), "dtype"), [ast.Is()], [self.constant(dtype)])
        self.helper("_type")
        test = ast.BoolOp(ast.And(), [ast.Name(scalars.PLAIN, ast.Load()), plain, same])
        mul = self.bind(_op_prefix("mul"), support.default_callable("mul"))
        return ast.IfExp(test, ast.Call(mul, [x(tensor), x(tensor)], []), call)

    def group_norm_unchecked(self, node: Node, call: ast.expr) -> ast.expr:
        """``call``, or for a ``group_norm`` with a literal group count ``g``, the kernel
        itself where the check it runs through (``checked_ops.group_norm``) holds inline: a
        plain tensor of 2+ dimensions with at least ``g`` channels (``g`` 1: any count).
        The check's Python frame costs about 1.2 us of 3.5 (torch 2.13, one thread)."""
        if node.op != "group_norm" or not self.fold or not isinstance(call, ast.Call):
            return call
        groups = call.args[1] if len(call.args) > 1 else None
        if not isinstance(groups, ast.Constant) or type(groups.value) is not int:
            return call
        if groups.value < 1 or not self.default_call(node):
            return call
        x = call.args[0]
        tests = [
            ast.Compare(_call("_type", copy.deepcopy(x)), [ast.Is()], [self.helper("_Tensor")]),
            ast.Compare(_attr(copy.deepcopy(x), "ndim"), [ast.GtE()], [ast.Constant(2)]),
        ]
        self.helper("_type")
        if groups.value > 1:
            shape = _attr(copy.deepcopy(x), "shape")
            channels = ast.Subscript(shape, ast.Constant(1), ast.Load())
            tests.append(ast.Compare(channels, [ast.GtE()], [ast.Constant(groups.value)]))
        kernel = self.bind(_op_prefix("group_norm") + "kernel_", torch.group_norm)
        fast = ast.Call(kernel, copy.deepcopy(call.args), copy.deepcopy(call.keywords))
        return ast.IfExp(ast.BoolOp(ast.And(), tests), fast, call)

    def plan_unit_products(self, static: set[int], blocks: dict, dead_after: dict) -> None:
        """The guards that a product of sizes is not 1 whose nodes run only where one read
        of the tensor allows it (runtime/unit_products.py): not where another plan runs a
        node of theirs, nor where the tensor's last use is among them (the test reads it
        after; a skipped ``del`` would keep it alive)."""
        taken = (
            static
            | self._view_members
            | set(self._repeats)
            | set(self._merged)
            | self._merged_away
            | set(self._halves)
            | self._outside_lean
        )
        spans = [range(b.start, b.stop) for b in blocks.values()]
        for first, product in unit_products.plan(self.graph).items():
            nodes = range(first, product.guard + 1)
            if any(i in taken or any(i in span for span in spans) for i in nodes):
                continue
            if any(product.tensor in dead_after.get(i, ()) for i in nodes):
                continue
            self._unit_products[first] = product

    def unit_product(self, product: unit_products.UnitProduct, start: int, guard: Node) -> None:
        """Run the statements written since ``start`` (``product``'s nodes and its guard)
        only where one read of the tensor allows the product to be 1."""
        tensor = self.ref(Ref(product.tensor))
        if product.bound is not None:
            test = ast.Compare(_method(tensor, "numel"), [ast.LtE()], [ast.Constant(product.bound)])
        else:
            size = ast.Subscript(_attr(tensor, "shape"), ast.Constant(product.dim), ast.Load())
            test = ast.Compare(size, [ast.Eq()], [ast.Constant(1)])
        inner = self.body[start:]
        wrapped = ast.If(test, [s for s, _, _ in inner], [])
        wrapped._tb_body = inner  # keeps the comments of the wrapped statements
        self.body[start:] = [(wrapped, "a product of sizes may be 1", guard.loc)]

    def restore_grad_mode(self, start: int) -> None:
        """The code switches gradients on or off: put the caller's mode back, even on error."""
        inner = self.body[start:]
        save = ast.Assign([ast.Name("_grad_mode", ast.Store())], _call("_is_grad_enabled"))
        restore = ast.Expr(_call("_set_grad_enabled", _name("_grad_mode")))
        self.helper("_is_grad_enabled")
        self.helper("_set_grad_enabled")
        wrapped = ast.Try([s for s, _, _ in inner], [], [], [restore])
        wrapped._tb_body = inner  # keeps the comments of the wrapped statements
        self.body[start:] = [(save, None, None), (wrapped, None, None)]


class _KeyedCodeGen(CodeGen):
    """The code of a memoised block: its inputs are the sizes, devices and dtypes of its
    key, which the caller's code read from checked tensors (no tensor checks here)."""

    def input_checks(self, params: list[str]) -> None:
        return None


_DROPOUTS = frozenset({"dropout", "alpha_dropout", "dropout_"})
_GUARD_RECORD = re.compile(r"G\d+").fullmatch  # the names bind("G", ...) makes
# Factories whose sizes, when values, the generated code bounds inline (CodeGen.unless_large):
# their bytes are the product of their sizes times their element's width.
_BOUNDED_FACTORIES = frozenset(
    """zeros ones full empty rand randn Tensor.new_zeros Tensor.new_ones Tensor.new_full
    Tensor.new_empty""".split()
)
# Ops whose result has their input's elements times the sizes' product (the guard's count).
_BOUNDED_REPEATS = frozenset({"Tensor.repeat", "tile"})
# The keywords an ``arange`` bounded inline may take (CodeGen.unless_long_range): none that
# gives a number of its range.
_RANGE_KEYWORDS = frozenset({"dtype", "device", "layout", "pin_memory", "requires_grad"})
_NOT_OPS = frozenset({"prim.state", "prim.guard"})  # not counted as a folded value's ops
_DTYPE = {name: getattr(torch, name) for name in ("float16", "bfloat16", "float32", "float64")}


def _names_state(node: Node) -> bool:
    """Whether ``node`` (a ``prim.state``) names the state it reads."""
    return bool(node.args) and isinstance(node.args[0], str)


def _set_lean(value: ast.expr) -> ast.stmt:
    """``_lean = value``: the inference-mode guard of a call (None releases it)."""
    return ast.Assign([ast.Name("_lean", ast.Store())], value)


def _eval_dropout(node: Node) -> bool:
    """A dropout recorded in evaluation mode (``train`` the literal False)."""
    if node.op not in _DROPOUTS or not node.args or len(node.outputs) != 1:
        return False
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    return train is False and set(node.kwargs) <= {"train", "p"}


def _op_prefix(op: str) -> str:
    """``op_relu_``-style prefix for readable code: only for names of the op table (a
    closed set of our own names), reduced to letters, digits and ``_``; ``op`` else."""
    if not support.is_table_op(op):
        return "op"
    return "op_" + "".join(c if c.isascii() and c.isalnum() else "_" for c in op) + "_"


_FACTOR_LIMIT = 2**32


def _small_factor(node: Node) -> bool:
    """A ``scalar.mul`` of a value by a literal int or float of at most 2**32 in
    magnitude: written as ``*``. Its result grows by at most 32 bits per node, so no
    graph within the node limits builds a huge integer (squaring a value, which doubles
    its bits, still goes through the bounded function)."""
    if node.op != "scalar.mul" or node.kwargs or len(node.args) != 2:
        return False
    literals = [a for a in node.args if type(a) in (int, float)]
    refs = [a for a in node.args if isinstance(a, Ref)]
    return len(literals) == 1 and len(refs) == 1 and abs(literals[0]) <= _FACTOR_LIMIT


# Note: products of sizes, written as ``*``. A batch norm in training mode checks
# ``size(0) * size(2) * size(3) != 1`` on every call; through the op table's bounded
# ``scalar.mul`` that is two Python calls per product. What makes a product unsafe is
# an integer that grows without bound (squaring doubles its bits), so :func:`_int_bits`
# bounds the bits of each integer the graph makes from sizes (a size, a stride, a
# numel, an ``item``: 64 bits; a sum: one more than its widest term; a product through
# the bounded op: 64 bits, or it raises) and a product of two bounded values whose
# bits add up to at most ``_PRODUCT_BITS`` is written as ``*``: no chain of them makes
# an integer wider than that.
_PRODUCT_BITS = 256
_SIZE_PRIMS = frozenset(
    {"prim.size", "prim.numel", "prim.stride", "prim.storage_offset", "prim.len", "prim.item"}
)
# Ops whose result the op table bounds to 64 bits (they raise past it).
_BOUNDED_SCALARS = frozenset(
    """scalar.pow scalar.lshift scalar.abs scalar.ceil scalar.floor scalar.round
    scalar.trunc scalar.invert""".split()
)


def _literal_bits(arg, bits: dict[int, int]) -> int | None:
    if isinstance(arg, Ref):
        return bits.get(arg.id)
    if type(arg) is int or type(arg) is bool:
        return int(arg).bit_length()
    return None


def _int_bits(graph: Graph) -> dict[int, int]:
    """Bounds of the bits of the integers ``graph`` makes from sizes (see the Note)."""
    bits: dict[int, int] = {}
    for node in graph.nodes:
        if len(node.outputs) != 1 or node.kwargs:
            continue
        out = node.outputs[0].id
        terms = [_literal_bits(a, bits) for a in node.args]
        known = len(terms) == 2 and None not in terms
        if node.op in _SIZE_PRIMS or node.op in _BOUNDED_SCALARS:
            bits[out] = 64
        elif node.op in ("scalar.add", "scalar.sub", "scalar.mod") and known:
            bits[out] = max(terms) + 1
        elif node.op in ("scalar.floordiv", "scalar.neg") and terms and terms[0] is not None:
            bits[out] = terms[0] + 1  # |a // b| <= |a| + 1 for any integer b
        elif node.op == "scalar.mul":
            small = known and sum(terms) <= _PRODUCT_BITS
            bits[out] = sum(terms) if small else 64  # inline, or the bounded op
    return bits


# Reads whose result is a Python int (or, traced by torch.compile, a SymInt) for any
# tensor, and integer arithmetic that keeps ints ints.
_INT_READS = frozenset(
    {"prim.size", "prim.numel", "prim.stride", "prim.storage_offset", "prim.len"}
)
_INT_ARITHMETIC = frozenset(
    "scalar.add scalar.sub scalar.mul scalar.floordiv scalar.mod scalar.neg".split()
)


# getitem/setitem through runtime/checked_indices.py, which checks tensor indices' values
_CHECKED_INDEXING = {op: checked_indices.CHECKED[op] for op in ("getitem", "setitem")}
# What a basic index (no tensor, no list: nothing a kernel reads on the device) holds
_BASIC_LEAVES = (int, bool, type(None), type(Ellipsis))


def _basic_index(node: Node, python_ints: set[int]) -> bool:
    """Whether the index of a ``getitem``/``setitem`` node is basic whatever the file
    declares: literal ints, bools, slices, None and Ellipsis, in tuples, and values that
    are Python ints (:func:`_python_ints`). Such an index is bounded on the host by the
    kernel (an int out of range raises IndexError on every device), so the call skips
    checked_indices' Python frame (about 0.15 us, every slice of every call). A list is
    not basic: torch reads it as a tensor of indices."""
    if len(node.args) < 2:
        return False

    def basic(item) -> bool:
        kind = type(item)
        if kind is Ref:
            return item.id in python_ints
        if kind is tuple:
            return all(map(basic, item))
        if kind is slice:
            return all(basic(part) for part in (item.start, item.stop, item.step))
        return kind in _BASIC_LEAVES

    return basic(node.args[1])


def _python_ints(graph: Graph) -> set[int]:
    """Ids of the values of ``graph`` that are Python ints whatever kinds the file
    declares: size, numel, stride and length reads, and integer arithmetic on these and
    on literal ints (a file may declare ``abs(t)`` an int; its value is a tensor)."""
    ints: set[int] = set()
    for node in graph.nodes:
        if len(node.outputs) != 1 or node.kwargs:
            continue
        arithmetic = node.op in _INT_ARITHMETIC and all(
            a.id in ints if isinstance(a, Ref) else type(a) in (int, bool) for a in node.args
        )
        if node.op in _INT_READS or arithmetic:
            ints.add(node.outputs[0].id)
    return ints


def _small_product(node: Node, bits: dict[int, int]) -> bool:
    """A ``scalar.mul`` of two integers whose bits add up to at most ``_PRODUCT_BITS``."""
    if node.op != "scalar.mul" or node.kwargs or len(node.args) != 2:
        return False
    terms = [_literal_bits(a, bits) for a in node.args]
    return None not in terms and sum(terms) <= _PRODUCT_BITS


def _given(arg: ast.expr, test: ast.expr) -> ast.expr:
    """``arg`` where ``test`` holds: the constant of a number made a tensor
    (``c if _plain and ... else 0.5``, runtime/scalars.py) when its own test is a part of
    ``test``, ``arg`` itself otherwise."""
    if not isinstance(arg, ast.IfExp) or not isinstance(test, ast.BoolOp):
        return arg
    own = arg.test.values if isinstance(arg.test, ast.BoolOp) else [arg.test]
    known = {ast.dump(t) for t in test.values}
    return arg.body if all(ast.dump(t) in known for t in own) else arg


def _replace_name(tree: ast.expr, name: str, by: ast.expr) -> ast.expr:
    """``tree`` with every read of the variable ``name`` replaced by ``by``."""

    class Replace(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            return by if node.id == name else node

    return Replace().visit(tree)


def _inline(op: str, args: list[ast.expr]) -> ast.expr | None:
    """Python syntax for ops whose default implementation is an operator or attribute."""
    if op in _BINARY and len(args) == 2:
        return ast.BinOp(args[0], _BINARY[op](), args[1])
    if op in _COMPARE and len(args) == 2:
        return ast.Compare(args[0], [_COMPARE[op]()], [args[1]])
    if op == "scalar.neg" and len(args) == 1:
        return ast.UnaryOp(ast.USub(), args[0])
    if op in _ATTRIBUTE_PRIMS and len(args) == _ATTRIBUTE_PRIMS[op][0]:
        return _ATTRIBUTE_PRIMS[op][1](*args)
    return None


# --- from tree to function ---------------------------------------------------------------


class _Renderer:
    """Writes the display text of a function, one statement per line (compound statements
    over several), and gives every AST node the position of its line, so tracebacks
    through the generated code show the lines of ``.code``."""

    def __init__(self, gen: CodeGen, title: str):
        self.gen = gen
        self.title = title
        self.lines: list[str] = []
        self.locations: dict[int, str] = {}

    def put(self, text: str, nodes=(), note: str | None = None, loc: str | None = None) -> None:
        if note:
            text += f"  # {note}"
        if isinstance(loc, str) and loc:
            text += (", " if note else "  # ") + comment(loc.rsplit("/", 1)[-1])
            self.locations[len(self.lines) + 1] = loc
        self.lines.append(text)
        line = len(self.lines)
        for node in nodes:
            _place(node, line, len(text))

    def statement(self, stmt: ast.stmt, indent: str, note=None, loc=None) -> None:
        if isinstance(stmt, ast.If):
            self.put(f"{indent}if {ast.unparse(stmt.test)}:", [stmt.test], note, loc)
            _place(stmt, len(self.lines), 0, recurse=False)
            for inner, inner_note, inner_loc in getattr(stmt, "_tb_body", None) or [
                (inner, None, None) for inner in stmt.body
            ]:
                self.statement(inner, indent + "    ", inner_note, inner_loc)
            if stmt.orelse:
                self.put(f"{indent}else:")
                for inner in stmt.orelse:
                    self.statement(inner, indent + "    ")
        elif isinstance(stmt, ast.Try) and stmt.handlers:  # one statement, one fallback
            self.put(f"{indent}try:")
            _place(stmt, len(self.lines), 0, recurse=False)
            for inner in stmt.body:
                self.statement(inner, indent + "    ", note, loc)
            for handler in stmt.handlers:
                self.put(f"{indent}except {ast.unparse(handler.type)}:")
                _place(handler, len(self.lines), 0)
                for inner in handler.body:
                    self.statement(inner, indent + "    ")
        elif isinstance(stmt, ast.Try):
            self.put(f"{indent}try:")
            _place(stmt, len(self.lines), 0, recurse=False)
            for inner, inner_note, inner_loc in stmt._tb_body:
                self.statement(inner, indent + "    ", inner_note, inner_loc)
            self.put(f"{indent}finally:")
            for inner in stmt.finalbody:
                self.statement(inner, indent + "    ")
        else:
            _place(stmt, len(self.lines) + 1, 0)  # unparse reads positions
            self.put(indent + ast.unparse(stmt), [stmt], note, loc)

    def function(self, fn: ast.FunctionDef) -> str:
        params = ", ".join(a.arg for a in fn.args.posonlyargs)  # the bound names: see signature
        self.put(f"def {self.title}({params}):", [fn.args])
        _place(fn, 1, 0, recurse=False)
        for name, obj in self.gen.constants:
            self.lines.append(f"    # {name} = {comment(_describe(obj))}")
        for stmt, note, loc in self.gen.body:
            self.statement(stmt, "    ", note, loc)
        return "\n".join(self.lines) + "\n"


def _describe(obj) -> str:
    if isinstance(getattr(obj, "__self__", None), views.Views):
        return repr(obj.__self__)  # a tree's runner, bound: ``views(...)``
    if isinstance(obj, torch.dtype):
        return str(obj)
    if isinstance(obj, torch.device):
        return f"torch.device({str(obj)!r})"
    return repr(obj)


def _place(node: ast.AST, line: int, width: int, recurse: bool = True) -> None:
    for sub in ast.walk(node) if recurse else (node,):
        if "lineno" in sub._attributes:
            sub.lineno = sub.end_lineno = line
            sub.col_offset, sub.end_col_offset = 0, width


_linecache_lock = threading.Lock()
# Each compiled function gets its own file name: with one name per method ("forward"), the
# lines of one loaded module would replace another's in linecache, and a traceback or an
# OpError of one artifact would quote the code of another (a hostile file's, say).
_serial = itertools.count(1)


def _display_name(name: str) -> str:
    return name if _is_keyword_name(name) else comment(name).replace(">", "")


def _forget_lines(filename: str) -> None:
    with _linecache_lock:
        linecache.cache.pop(filename, None)


def compile_function(gen: CodeGen, filename: str | None = None) -> Generated:
    """Build ``gen``'s tree, compile it, and return the function with its display text."""
    # The tensors the tree holds (scalars made tensors) are made outside any torch function
    # mode: a loaded program compiles at its first call, which may be inside a trace of
    # code around it, and its constants are no op of that code (prober21b F8).
    with torch._C.DisableTorchFunction():
        tree = gen.build()
    title = gen.name if _is_keyword_name(gen.name) else tree.name
    renderer = _Renderer(gen, title)
    code_text = renderer.function(tree)
    unguarded = "" if gen.guards else ":unguarded"
    filename = filename or f"<tracebridge:{_display_name(gen.name)}{unguarded}#{next(_serial)}>"
    code = compile(ast.Module([tree], []), filename, "exec")
    namespace = dict(gen.globals)
    exec(code, namespace)  # noqa: S102 - compiled from a tree of our own names and constants
    function = namespace[tree.name]
    # The method's name is data on the function (backends and tracebacks show it); in
    # the tree, a name such as ``op0`` would have replaced one of the function's globals.
    function.__code__ = function.__code__.replace(co_name=title, co_qualname=title)
    function.__name__ = function.__qualname__ = title
    with _linecache_lock:  # tracebacks through the function show the lines of .code
        linecache.cache[filename] = (len(code_text), None, code_text.splitlines(True), filename)
    weakref.finalize(function, _forget_lines, filename)  # loads and reloads do not pile up
    return Generated(function, code_text, renderer.locations)


def generate(
    graph: Graph, slots: dict, name: str, guards: bool = True, methods=None
) -> tuple[str, Callable]:
    """Return ``(code, function)`` for ``graph`` (``code`` is for display)."""
    result = compile_function(CodeGen(graph, slots, name, guards, methods))
    return result.code, result.function
