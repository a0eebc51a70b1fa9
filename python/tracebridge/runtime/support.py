"""What generated code and the interpreter share: op lookup, guard failures, checks."""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable

import torch

from ..errors import ArtifactError, GuardError, GuardValueError, OpError, TraceError
from ..ir import DTYPES, Graph, Node, Ref, dtypes, pytree, refs_in
from ..ir import ops as opset
from ..ir.printable import printable
from ..ir.program import AUTOGRAD_FUNCTION
from ..source import source_line
from . import caller_memory, checked_ops, checked_sizes, checked_views, torchvision_ops
from .checked_ops7 import CHECKED_SINCE_7

# The device types whose autocast a graph may read: a file naming another is refused, not
# passed on to torch.
AUTOCAST_DEVICES = frozenset(opset.AUTOCAST_DEVICE_TYPES)


def _autocast_device(device):
    """``device``, a device type whose autocast ``prim.autocast_*`` may read."""
    if device not in AUTOCAST_DEVICES:
        raise ArtifactError(
            f"prim.autocast_enabled/prim.autocast_dtype: {device!r} is not a device type "
            f"autocast has; one of {sorted(AUTOCAST_DEVICES)}"
        )
    return device


def autocast_enabled(device: str) -> bool:
    """``prim.autocast_enabled``: whether the caller's autocast is on for ``device``."""
    return torch._C.is_autocast_enabled(_autocast_device(device))


def autocast_dtype(device: str) -> torch.dtype:
    """``prim.autocast_dtype``: the dtype of the caller's autocast for ``device``."""
    return torch._C.get_autocast_dtype(_autocast_device(device))


def _distributed_initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


# torch's own function, bound before a recording replaces it (trace/patches.py)
_default_dtype = torch.get_default_dtype
_default_device = torch.get_default_device


def _first(flags) -> bool:
    """The reduced-precision flag of cuBLAS's setting: a pair (allowed, split-k) in recent
    torch, a bool before."""
    return bool(flags[0] if isinstance(flags, tuple) else flags)


def _default_device_type() -> int:
    return opset.DEVICE_TYPES.index(_default_device().type)


def _default_device_index() -> int:
    index = _default_device().index
    return -1 if index is None else index


def _opt_einsum(attribute: str):
    """opt_einsum's flag as torch reads it: a plain attribute of torch.backends' stand-in
    module (a user's write is in the module's own dict), read past the descriptor a
    recording puts on its class (trace/patches.py)."""
    module = torch.backends.opt_einsum
    own = vars(module)
    return own[attribute] if attribute in own else getattr(module.m, attribute)


def _opt_einsum_strategy() -> int:
    strategy = _opt_einsum("strategy")
    return opset.OPT_EINSUM_STRATEGIES.index("none" if strategy is None else strategy)


_SETTING_READERS = {
    "num_threads": torch.get_num_threads,
    "num_interop_threads": torch.get_num_interop_threads,
    "float32_matmul_precision": lambda: opset.MATMUL_PRECISIONS.index(
        torch.get_float32_matmul_precision()
    ),
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    "deterministic_algorithms_warn_only": torch.is_deterministic_algorithms_warn_only_enabled,
    "cuda_available": torch.cuda.is_available,
    "distributed_initialized": _distributed_initialized,
    "anomaly_enabled": torch.is_anomaly_enabled,
    "anomaly_check_nan": torch.is_anomaly_check_nan_enabled,
    "default_dtype": lambda: opset.DEFAULT_DTYPES.index(dtypes.DTYPE_NAMES[_default_dtype()]),
    "cudnn_enabled": torch._C._get_cudnn_enabled,
    "cudnn_allow_tf32": torch._C._get_cudnn_allow_tf32,
    "cudnn_deterministic": torch._C._get_cudnn_deterministic,
    "cudnn_benchmark": torch._C._get_cudnn_benchmark,
    "cublas_allow_tf32": torch._C._get_cublas_allow_tf32,
    "cublas_allow_fp16_reduced_precision": lambda: _first(
        torch._C._get_cublas_allow_fp16_reduced_precision_reduction()
    ),
    "cublas_allow_bf16_reduced_precision": lambda: _first(
        torch._C._get_cublas_allow_bf16_reduced_precision_reduction()
    ),
    "mkldnn_enabled": torch._C._get_mkldnn_enabled,
    "math_sdp_enabled": torch.backends.cuda.math_sdp_enabled,
    "flash_sdp_enabled": torch.backends.cuda.flash_sdp_enabled,
    "mem_efficient_sdp_enabled": torch.backends.cuda.mem_efficient_sdp_enabled,
    "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled,
    "default_device_type": _default_device_type,
    "default_device_index": _default_device_index,
    "mha_fastpath_enabled": torch.backends.mha.get_fastpath_enabled,
    "opt_einsum_enabled": lambda: bool(_opt_einsum("enabled")),
    "opt_einsum_strategy": _opt_einsum_strategy,
    "warn_always": torch.is_warn_always_enabled,
}
assert set(_SETTING_READERS) == set(opset.SETTINGS)


def setting(name: str):
    """``prim.setting``: a process-wide setting of torch, read now."""
    reader = _SETTING_READERS.get(name)
    if reader is None:
        raise ArtifactError(
            f"prim.setting: {name!r} is not a setting; one of {list(opset.SETTINGS)}"
        )
    return reader()


def _has_grad_fn(tensor: torch.Tensor) -> bool:
    return tensor.grad_fn is not None


def _is_contiguous_as(tensor: torch.Tensor, memory_format: torch.memory_format) -> bool:
    return tensor.is_contiguous(memory_format=memory_format)


PRIM_FUNCTIONS = {
    "prim.size": lambda t, d: t.shape[d],
    "prim.numel": lambda t: t.numel(),
    "prim.dtype": lambda t: t.dtype,
    "prim.device": lambda t: t.device,
    "prim.item": lambda t: t.item(),
    "prim.tolist": lambda t: t.tolist(),
    "prim.bool": bool,
    "prim.int": int,
    "prim.float": float,
    "prim.len": len,
    "prim.grad_enabled": torch.is_grad_enabled,
    # As the generated code reads it (codegen._ATTRIBUTE_PRIMS), so that both runtimes
    # read a dimension alike (a bool of a hostile file: index 1 in both, as prim.size).
    "prim.stride": lambda t, d: t.stride()[d],
    "prim.requires_grad": lambda t: t.requires_grad,
    "prim.is_contiguous": lambda t: t.is_contiguous(),
    "prim.storage_offset": lambda t: t.storage_offset(),
    "prim.is_contiguous_as": _is_contiguous_as,
    "prim.is_inference": lambda t: t.is_inference(),
    "prim.is_leaf": lambda t: t.is_leaf,
    "prim.has_grad_fn": _has_grad_fn,
    "prim.is_neg": lambda t: t.is_neg(),
    "prim.is_conj": lambda t: t.is_conj(),
    "prim.inference_mode": torch.is_inference_mode_enabled,
    "prim.autocast_enabled": autocast_enabled,
    "prim.autocast_dtype": autocast_dtype,
    "prim.setting": setting,
    "prim.is_device_type": lambda t, kind: t.device.type == kind,
}


# Note: an OpError is also an instance of the op's own exception class where Python allows
# it (``except IndexError`` keeps working, as in eager PyTorch and as docs/security.md
# says), while ``except TraceError`` catches every failure of a loaded graph.
_OP_ERRORS: dict[type, type] = {}


def _op_error_class(cls: type) -> type:
    made = _OP_ERRORS.get(cls)
    if made is None:
        try:
            made = type("OpError", (OpError, cls), {"__module__": __name__})
            if str(made("probe", None)) != "probe":  # KeyError quotes, UnicodeError formats
                made = OpError
        except Exception:  # a layout or an __init__ that does not mix: a plain OpError
            made = OpError
        _OP_ERRORS[cls] = made
    return made


def _failed_step(tb) -> tuple[str, str]:
    """Where in the graph a traceback went wrong, in the user's words: the op and the
    source line it was recorded at (``at Tensor.add_, model.py:3: `return x.add_(1)```),
    from the interpreter's node or the generated line's comment; and that generated line
    itself ('' for the interpreter), for the caller to read. Note: the generated code is
    not shown: its names (``op_Tensor_add__2``, ``_plain``, ``c0``) mean nothing to a user
    (prober21b M2); ``.code`` shows it."""
    where, raw = "", ""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.startswith("<tracebridge:"):
            line = linecache.getline(frame.f_code.co_filename, tb.tb_lineno).strip()
            if line:
                raw = line
                where = _generated_where(line, frame.f_globals.get("_graph"), tb.tb_lineno)
        elif frame.f_code.co_name == "run_op" and isinstance(frame.f_locals.get("node"), Node):
            node = frame.f_locals["node"]
            where = _op_where(node.op, node.loc or "")
        tb = tb.tb_next
    return where, raw


_LOCATION = re.compile(r":\d+$")


def _generated_where(line: str, graph, lineno: int) -> str:
    """The op and source location a generated line's comment names (``# add, f.py:3``),
    with the location made whole from the graph's nodes where it can be; else which line
    of ``.code`` it was."""
    _, hash_mark, note = line.rpartition("  # ")
    if not hash_mark:
        return f"at line {lineno} of the traced program (its .code shows it)"
    parts = note.split(", ")
    short = parts.pop() if len(parts) > 1 and _LOCATION.search(parts[-1]) else ""
    op = ", ".join(parts)
    loc = short
    if short and isinstance(graph, Graph):
        found = [n.loc for n in graph.nodes if n.loc and n.loc.rsplit("/", 1)[-1] == short]
        exact = [n.loc for n in graph.nodes if n.op == op and n.loc in found]
        loc = (exact or found or [short])[0]
    return _op_where(op, loc)


def _op_where(op: str, loc: str) -> str:
    text = source_line(loc) if loc else ""
    return f"at {op}" + (f", {loc}" if loc else "") + (f": `{text[:200]}`" if text else "")


# A generated line that reads a state entry: ``v1 = S0['weight']``.
_STATE_READ = re.compile(r"= S\d+\[")


def changed_state(
    method: str, graph: Graph, slots: dict, exc: BaseException | None
) -> OpError | None:
    """After an op of ``method`` failed: an :class:`OpError` naming a state entry the graph
    reads that is gone from its module, or is no tensor now (``remove_weight_norm``,
    ``prune.remove``, a batch norm's ``running_mean`` set to None), else None. Run only on
    the failure path: a call pays nothing for it.

    Note: why here. The values folded from the state read it before any op runs, and a
    removed entry failed there with a bare KeyError or AttributeError that the generic
    message blamed on the inputs."""
    names = [node.args[0] for node in graph.nodes if node.op == "prim.state" and node.args]
    for name in dict.fromkeys(n for n in names if isinstance(n, str)):
        owner, key = slots.get(name, (None, None))
        if owner is None:
            continue
        value = owner.get(key, _GONE)
        if value is _GONE:
            now = "is gone from its module (removed since tracing"
        elif isinstance(value, torch.Tensor):
            continue
        else:
            now = f"is {type(value).__name__} now, not a tensor (changed since tracing"
        return OpError(
            f"method {method!r}: the state entry {name!r} that the traced program reads "
            f"{now}: remove_weight_norm, prune.remove, a parametrization, a batch norm's "
            "running statistics set to None...); the trace holds the code as it was: trace "
            "again after the change",
            exc,
        )
    return None


_GONE = object()


def op_failed(method: str, exc: BaseException, from_file: bool = True) -> OpError:
    """The :class:`OpError` for ``exc``, raised by an op while ``method`` ran; ``from_file``:
    whether the graph was read from a file, which may then be the cause."""
    where, line = _failed_step(exc.__traceback__)
    where = where or "(while building its inputs or outputs)"
    # The first line, bounded (a kernel's message may list every overload); the checked
    # implementations' say why and what to do within it.
    text = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
    if isinstance(exc, KeyError) and _STATE_READ.search(line):
        return OpError(  # a plain one: KeyError would quote the message
            f"method {method!r}: the state entry {text} read {where} is gone from its "
            "module: a parameter or buffer was removed since tracing (a parametrization "
            "such as weight_norm registered, a sub-module's tensor deleted); trace again "
            "after the change",
            exc,
        )
    cause = "the inputs do not suit the traced program (sizes, values)"
    if from_file:
        cause += ", or the artifact is corrupt or hostile (tracebridge validate checks the file)"
    return _op_error_class(type(exc))(
        f"method {method!r}: an op failed {where}: {type(exc).__name__}: {text}; {cause}", exc
    )


def node_callable(node: Node, methods: dict[str, Graph]) -> Callable:
    """The callable that runs ``node``: the ONE place where both runtimes turn a node into
    a function (generated code binds the result as a constant; the interpreter calls it).
    ``methods`` are the program's graphs by name (may be empty). A custom autograd function
    (``prim.autograd_function``) is an autograd function made by the runtime from the two
    graphs it names (runtime/autograd_function.py). Otherwise the op's implementation from
    the op table; an op outside it is an :class:`ArtifactError`."""
    if node.op == AUTOGRAD_FUNCTION:
        from .autograd_function import function_callable  # it builds Methods, which import us

        return function_callable(node, methods)
    fn = default_callable(node.op)
    if node.op in torchvision_ops.CHECKED:
        torchvision_ops.require(node)  # at load: where torchvision is missing, say so now
    if node.op in checked_ops.SIZED_OPS:
        fn = _sized(node, fn)
    elif node.op in checked_ops.SECTIONED and _literal_count(node):
        fn = checked_ops.SECTIONED[node.op]
    if checked_sizes.needs_bound(node):  # a padding, an FFT length: bytes at the call
        fn = checked_sizes.bounded(node.op, fn, checked_sizes.kernel_covering(node))
    return fn


def _literal_count(node: Node) -> bool:
    """Whether ``node`` (``chunk``, ``tensor_split``, ...) asks for its count of results as
    a literal int within ``LIMITS['results']`` (by position, its dimension the only
    keyword): the count its checked implementation bounds on every call is then the one
    the loader bounded already (check/program.py), and the kernel runs without the check
    (about 0.6 us of 2.6 for a ``chunk``, torch 2.13, one thread)."""
    count = node.args[1] if len(node.args) > 1 else None
    return (
        type(count) is int
        and 0 <= count <= checked_ops.LIMITS["results"]
        and set(node.kwargs) <= {"dim"}
    )


def _size_positions(node: Node) -> tuple[list[int], list[str], int | None]:
    """Where ``node`` (an op of ``checked_ops.SIZED_OPS``) takes sizes: the positions, the
    keywords it is given, and the position from which sizes may be spread (or None)."""
    info = opset.info(node.op)
    positions = [i for i, names in enumerate(info.arg_names) if opset.SIZE_ARGUMENTS & set(names)]
    keys = [k for k in node.kwargs if k in opset.SIZE_ARGUMENTS]
    spread = info.varargs[0] if info.varargs else None
    return positions, keys, spread


def size_arguments(node: Node) -> list:
    """The arguments of ``node`` (an op of ``checked_ops.SIZED_OPS``) that give sizes, as
    the file writes them (ints, values, sequences of these)."""
    if node.op == "arange":
        return list(node.args) + list(node.kwargs.values())
    positions, keys, spread = _size_positions(node)
    size_args = [
        a for i, a in enumerate(node.args) if i in positions or (spread is not None and i >= spread)
    ]
    return size_args + [node.kwargs[k] for k in keys]


def _sized(node: Node, fn: Callable) -> Callable:
    """``fn``, bounded at the call when a size argument of ``node`` is a value of the graph
    (sizes written in the file are bounded at load)."""
    # eye's literal sizes too: the loader counts eye(n=...) by keyword as n, not n x n;
    # and repeat's and tile's, which multiply the caller's elements (ir/ops.py: a scale).
    if not refs_in(size_arguments(node)) and node.op not in ("eye", "Tensor.repeat", "tile"):
        return fn
    positions, keys, spread = _size_positions(node)
    return checked_ops.sized_guard(node.op, fn, positions, keys, spread)


def default_callable(name: str) -> Callable:
    """The op table's implementation of op ``name`` (what :func:`node_callable` gives
    unless a node needs another): generated code writes operators and attribute reads
    inline only when a node's callable is this one."""
    if name in checked_views.CHECKED:  # op-set 4 views: bounded before the kernel runs
        return checked_views.CHECKED[name]
    if name in PRIM_FUNCTIONS:
        return PRIM_FUNCTIONS[name]
    if name in checked_ops.CHECKED:
        return checked_ops.CHECKED[name]
    if name in torchvision_ops.CHECKED:
        return torchvision_ops.CHECKED[name]
    if name in CHECKED_SINCE_7:  # op-set 7 checked ops (runtime/checked_ops7.py)
        return CHECKED_SINCE_7[name]
    try:
        return opset.impl_of(name)
    except (KeyError, TypeError):
        raise ArtifactError(
            f"op {name!r} is not in tracebridge's op set (version {opset_version()}); the "
            "artifact was made by a newer tracebridge or is corrupt"
        ) from None


def is_table_op(name) -> bool:
    """Whether ``name`` is an op of the op table (an implementation or a ``prim``)."""
    return isinstance(name, str) and (name in PRIM_FUNCTIONS or opset.is_known(name))


def opset_version() -> int:
    from ..ir import OPSET_VERSION

    return OPSET_VERSION


def _short_repr(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...]"


def guard_message(node: Node, seen, line: str = "") -> str:
    """The message of a failed guard. ``line`` is the source text the artifact stored for
    ``node.loc`` at trace time: a runtime never opens a file a loaded graph names."""
    # Text from the file (the description, loc and source line) is escaped to print.
    what = printable(str(node.kwargs.get("what", "a traced value")))
    expect = node.kwargs.get("expect")
    kind = node.kwargs.get("kind", "value")
    loc = printable(node.loc) if node.loc else "unknown location"
    where = f"{loc}" + (f": {printable(line)}" if line else "")
    if kind == "branch" and isinstance(expect, bool):
        head = f"the trace assumed that {what} is {expect}, but now it is {seen}"
    elif kind == "loop":
        head = f"the trace unrolled a Python loop for {what} == {expect!r}, but now it is {seen!r}"
    elif kind == "count":
        head = f"the trace assumed {what} gives {expect} results, but now it gives {seen}"
    else:
        head = (
            f"the trace assumed {what} == {_short_repr(expect)}, but now it is {_short_repr(seen)}"
        )
    return (
        f"{head}\n  assumption made at {where}\n  this call takes another path than the "
        "traced one: trace again with inputs like this one, or remove the Python-level "
        "decision from the traced code"
    )


# A guard's description that names the exception eager raises on the branch's other side
# (trace/recorder.py EAGER_RAISES; shared_ir/SPEC.md section 8).
_RAISES = re.compile(r"\[raises ValueError: ([^\]]*)\] (.*)", re.DOTALL)


def raise_guard(node: Node, seen, line: str = ""):
    what = node.kwargs.get("what", "")
    raises = _RAISES.fullmatch(what) if isinstance(what, str) else None
    if raises is not None:
        # eager raises a ValueError on this side of the branch: so does the call (a
        # GuardError still), with eager's words first
        words, what = raises.groups()
        plain = Node(node.op, node.args, {**node.kwargs, "what": what}, loc=node.loc)
        raise GuardValueError(
            f"{printable(words)}: {guard_message(plain, seen, line)}",
            guard=what,
            location=node.loc or "",
            seen=seen,
        )
    raise GuardError(
        guard_message(node, seen, line),
        guard=what,
        location=node.loc or "",
        seen=seen,
    )


def count_guard(node: Node, index: int):
    """A synthetic guard node describing an op whose number of results changed."""
    return Node(
        op="prim.guard",
        kwargs={"what": f"{node.op}(...)", "expect": index, "kind": "count"},
        loc=node.loc,
    )


def check_count(result, expected: int, node: Node, line: str = ""):
    if len(result) != expected:
        raise_guard(count_guard(node, expected), len(result), line)
    return result


def source_of(graph: Graph, loc) -> str:
    """The line text the artifact stored for ``loc`` (``''`` when it has none)."""
    text = graph.sources.get(loc, "") if isinstance(loc, str) else ""
    return text if isinstance(text, str) else ""


def _leaf_count(spec) -> int:
    try:
        return pytree.count_leaves(spec)
    except (KeyError, TypeError, AttributeError):
        return -1  # malformed: matches no number of outputs


def check_graph(graph: Graph, name: str) -> None:
    """What both runtimes rely on: every ref names a value defined before it, and every
    node has one output per leaf of its out_spec. Checked before a graph first runs, so a
    corrupt graph is an :class:`ArtifactError` naming the node, never a ``KeyError`` in the
    middle of a call (the load-time checker reports this and every other rule)."""
    defined = {v.id for v in graph.inputs}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            if ref.id not in defined:
                raise ArtifactError(
                    f"method {name!r}, node {index} ({node.op}): uses value {ref.id!r}, which "
                    "is not defined before it; the file is corrupt (tracebridge validate "
                    "lists every problem)"
                )
        if node.op == "prim.guard" and (len(node.args) != 1 or "expect" not in node.kwargs):
            raise ArtifactError(
                f"method {name!r}, node {index} (prim.guard): a guard takes one argument and "
                "an 'expect' keyword; the file is corrupt"
            )
        if node.op != "prim.guard" and _leaf_count(node.out_spec) != len(node.outputs):
            raise ArtifactError(
                f"method {name!r}, node {index} ({node.op}): {len(node.outputs)} outputs but "
                f"{_leaf_count(node.out_spec)} leaves in its out_spec; the file is corrupt"
            )
        defined.update(v.id for v in node.outputs)
    for ref in refs_in(graph.outputs):
        if ref.id not in defined:
            raise ArtifactError(
                f"method {name!r}: returns value {ref.id!r}, which no node defines; the file "
                "is corrupt"
            )


# The kind of a dtype, from the one dtype table (ir/dtypes.py): a call may change an input's
# dtype within its kind (float32 to float64 after .double()), not across kinds: code often
# branches on is_floating_point(). Generated code compares these one-letter codes.
DTYPE_KIND = {d.torch: d.kind[0] for d in dtypes.TABLE}  # "f", "c", "b" or "i"
KIND_WORDS = {"f": "floating-point", "c": "complex", "b": "bool", "i": "integer"}


def kind_of(dtype_name: str | None) -> str | None:
    return DTYPE_KIND.get(DTYPES.get(dtype_name or ""))


def reshaped_inputs(graph: Graph) -> dict[int, Node]:
    """``input position -> the first node that reshapes it in place`` (``x.unsqueeze_(0)``,
    or a write into the result of one, which is the same tensor object)."""
    position = {v.id: i for i, v in enumerate(graph.inputs)}
    found: dict[int, Node] = {}
    for node in graph.nodes:
        first = node.args[0] if node.args else None
        if not (isinstance(first, Ref) and first.id in position and opset.is_inplace(node.op)):
            continue
        for value in node.outputs:  # an op in place returns the tensor it was given
            position.setdefault(value.id, position[first.id])
        if node.op in caller_memory.RESHAPED_IN_PLACE:
            found.setdefault(position[first.id], node)
    return found


def check_not_repeated(graph: Graph, leaves, reshaped: dict[int, Node]) -> None:
    """Refuse a call that passes an input the graph reshapes in place (:func:`reshaped_inputs`)
    as another input too: the one tensor object then changes shape under both names, where
    the trace saw two (the sizes it read of the other are not its sizes)."""
    for position, node in reshaped.items():
        tensor = leaves[position]
        for other, leaf in enumerate(leaves):
            if other != position and leaf is tensor:
                raise TraceError(
                    f"input {position} ({graph.inputs[position].name}) is also passed as "
                    f"input {other} ({graph.inputs[other].name}), the same tensor object: "
                    f"the traced code reshapes it in place ({node.op}"
                    f"{' at ' + node.loc if node.loc else ''}), which reshapes the other "
                    "too, and the trace was made with two tensors; pass two tensor objects "
                    "(x.view_as(x) is another one on the same memory)"
                )


def check_inputs(graph: Graph, leaves) -> None:
    """Inputs must be tensors of the traced rank and dtype kind (sizes may vary)."""
    for i, (value, leaf) in enumerate(zip(graph.inputs, leaves)):
        if leaf is None:
            continue
        if not isinstance(leaf, torch.Tensor):
            raise TraceError(
                f"input {i} ({value.name}) must be a tensor, got {type(leaf).__name__}"
            )
        if leaf.dim() != len(value.shape or []):
            raise GuardError(
                f"input {value.name} has {leaf.dim()} dimensions, but the trace was made with "
                f"{len(value.shape or [])} ({value.type_str()}); pass a tensor of that rank",
                guard=f"{value.name}.dim() == {len(value.shape or [])}",
                seen=leaf.dim(),
            )
        want = kind_of(value.dtype)
        if want is not None and DTYPE_KIND.get(leaf.dtype) != want:
            dtype = str(leaf.dtype).replace("torch.", "")
            raise GuardError(
                f"input {value.name} has dtype {dtype}, but the trace was made with "
                f"{value.dtype}; pass a {KIND_WORDS[want]} tensor (the traced code may depend "
                "on the kind of dtype)",
                guard=f"{value.name} is {KIND_WORDS[want]}",
                seen=dtype,
            )


def bad_input(index: int, graph: Graph, leaf):
    if leaf is None:  # check_inputs skips None: it marks the inputs before ``index``
        value = graph.inputs[index]
        raise TraceError(
            f"input {index} ({value.name}) is None, but the trace was made with a tensor "
            f"there ({value.type_str()}); pass a tensor, or trace the call that passes None "
            "separately (code that tests `is None` takes another path)"
        )
    check_inputs(graph, [None] * index + [leaf])
    raise TraceError(f"input {index} is not what the trace expects")  # pragma: no cover
