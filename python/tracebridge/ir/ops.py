"""The op set: the closed list of operations a graph may name, and how each one runs.

Note: an op's canonical name is where it lives in PyTorch's public API: ``relu`` for
``torch.relu``, ``Tensor.view`` for a method with no ``torch.`` function, ``gelu`` for
``torch._C._nn.gelu`` (what ``F.gelu`` is; ``nn.X`` only if ``torch.X`` is another op),
``linalg.X``/``fft.X``/``special.X``.
A Tensor method folds into the function of the same name (``x.relu()`` and
``torch.relu(x)`` are both ``relu``) only when the two take the same positional
arguments; ``FOLDED_METHODS`` lists those, so folding never changes what runs.
Python composites (``F.relu``, ``F.batch_norm``, ``Tensor.__rsub__``) are not ops: the
tracer descends into them and records the builtins they call, so ``F.relu``,
``torch.relu`` and ``Tensor.relu`` all end up as one ``relu`` node.

The table is built once at import from PyTorch's builtin namespaces, minus ``DENIED``
(anything with effects outside tensors, or that turns a tensor into Python data, which
the tracer handles itself). A loader resolves names only through ``impl_of``; it never
calls ``getattr`` on a name it read from a file.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch

# Tensor methods that behave exactly like the torch function of the same name.
FOLDED_METHODS = frozenset(
    """
abs absolute acos add addbmm addcdiv addcmul addmm addmv all allclose amax amin aminmax any
argmax argmin argsort asin atan atan2 baddbmm bitwise_and bitwise_not bitwise_or
bitwise_xor bmm ceil chunk clamp clamp_max clamp_min clip clone cos cosh count_nonzero
cross cummax cummin cumprod cumsum deg2rad det detach diag diag_embed diagonal diff digamma flatten
dist div divide dot eq equal erf erfc erfinv exp exp2 expm1 fix float_power floor
floor_divide fmax fmin fmod frac gather gcd ge greater greater_equal gt hardshrink
heaviside histc hypot i0 index_add index_copy index_fill index_put index_select inner
inverse isclose isfinite isinf isnan isneginf isposinf isreal kron kthvalue lcm ldexp le
lerp less less_equal lgamma log log10 log1p log2 log_softmax logaddexp logaddexp2
logcumsumexp logdet logical_and logical_not logical_or logical_xor logit logsumexp lt
masked_fill masked_scatter masked_select matmul matrix_exp matrix_power max maximum mean
median min minimum mm mode moveaxis movedim msort mul multiply mv mvlgamma nan_to_num
nanmean nanmedian nanquantile nansum narrow narrow_copy ne neg negative nextafter nonzero
not_equal numel outer pinverse polygamma positive pow prod qr quantile rad2deg
reciprocal relu remainder renorm repeat_interleave roll rot90 round rsqrt scatter
scatter_add scatter_reduce select select_scatter sgn sigmoid sign signbit sin sinc sinh
slice_scatter slogdet softmax sort split split_with_sizes sqrt square squeeze std sub
subtract sum svd swapaxes swapdims t take take_along_dim tan tanh tensor_split topk trace
transpose trapz tril triu true_divide trunc unbind unique_consecutive unsqueeze var vdot
xlogy
""".split()
)

# Operator dunders and the op each is (reflected forms only where the value is the same).
DUNDER_OPS = {
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "Tensor.add_",
    "__sub__": "sub",
    "__isub__": "Tensor.sub_",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__imul__": "Tensor.mul_",
    "__truediv__": "div",
    "__itruediv__": "Tensor.div_",
    "__div__": "div",
    "__matmul__": "matmul",
    "__neg__": "neg",
    "__abs__": "abs",
    "__pow__": "pow",
    "__ipow__": "Tensor.pow_",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "__xor__": "bitwise_xor",
    "__iand__": "Tensor.bitwise_and_",
    "__ior__": "Tensor.bitwise_or_",
    "__ixor__": "Tensor.bitwise_xor_",
    "__invert__": "bitwise_not",
    "__eq__": "eq",
    "__ne__": "ne",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__mod__": "remainder",
    "__floordiv__": "floor_divide",
    "__lshift__": "bitwise_left_shift",
    "__rshift__": "bitwise_right_shift",
    "__getitem__": "getitem",
    "__setitem__": "setitem",
}
# Dunders that keep their own name: the reflected operand order matters.
OWN_DUNDERS = (
    "__rsub__",
    "__rtruediv__",
    "__rdiv__",
    "__rpow__",
    "__rmatmul__",
    "__rfloordiv__",
    "__rmod__",
    "__rand__",
    "__ror__",
    "__rxor__",
    "__rlshift__",
    "__rrshift__",
    "__ilshift__",
    "__irshift__",
    "__imod__",
    "__ifloordiv__",
)

# Never recorded: effects outside tensors, global state, hooks, storage access.
DENIED = frozenset(
    """
save load from_file set_default_dtype set_default_tensor_type manual_seed seed
set_rng_state get_rng_state set_num_threads set_num_interop_threads set_grad_enabled
is_grad_enabled set_printoptions use_deterministic_algorithms compile
set_anomaly_enabled is_anomaly_enabled set_flush_denormal backward register_hook
register_post_accumulate_grad_hook retain_grad data_ptr storage untyped_storage
share_memory_ pin_memory apply_ map_ map2_ tofile record_stream set_ is_pinned
is_shared __reduce_ex__ __setstate__ __getstate__ __deepcopy__ __dir__ __array__
__array_wrap__ __array_priority__ __dlpack__ __dlpack_device__ __torch_function__
__torch_dispatch__ __init_subclass__ __new__ __init__ __class__ __sizeof__ __reduce__
__del__ __cuda_array_interface__ dim_order module_load as_subclass
""".split()
)

# The tracer turns these into Python values itself (sizes, guards, provenance).
SPECIAL = frozenset(
    """
size dim ndimension numel nelement stride storage_offset element_size is_contiguous
is_floating_point is_complex is_signed is_set_to is_same_size is_nonzero has_names
get_device item tolist numpy __bool__ __int__ __float__ __index__ __complex__ __len__
__iter__ __contains__ __reversed__ __repr__ __format__ __hash__ is_inference
is_conj is_neg nbytes itemsize
""".split()
)

# Tensor properties read through a getter; each maps to how the tracer treats it.
TENSOR_OP_PROPERTIES = ("T", "mT", "H", "mH", "real", "imag", "data")
TENSOR_META_PROPERTIES = (
    "requires_grad",
    "is_leaf",
    "is_cuda",
    "is_cpu",
    "is_sparse",
    "is_quantized",
    "is_meta",
    "is_mkldnn",
    "is_nested",
    "layout",
    "ndim",
    "names",
    "grad_fn",
    "is_mps",
    "is_xpu",
    "output_nr",
    "_version",
    "retains_grad",
    "is_sparse_csr",
    "itemsize",
    "nbytes",
    "_base",
    "is_ipu",
    "is_xla",
    "is_vulkan",
    "is_maia",
    "is_mtia",
)

# Ops whose number of outputs depends on the input's shape: the runtime checks the count.
VARIADIC_OUTPUTS = frozenset(
    {
        "unbind",
        "split",
        "split_with_sizes",
        "chunk",
        "tensor_split",
        "unsafe_split",
        "unsafe_chunk",
        "hsplit",
        "vsplit",
        "dsplit",
        "Tensor.unsafe_split",
        "unique_consecutive",
    }
)

# Ops whose result depends on the random number generator.
RANDOM_OPS = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "randperm",
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "multinomial",
        "normal",
        "poisson",
        "dropout",
        "dropout_",
        "alpha_dropout",
        "feature_dropout",
        "feature_alpha_dropout",
        "Tensor.uniform_",
        "Tensor.normal_",
        "Tensor.bernoulli_",
        "Tensor.random_",
        "Tensor.exponential_",
        "Tensor.geometric_",
        "Tensor.cauchy_",
        "Tensor.log_normal_",
        "nn.rrelu_with_noise",
        "rrelu",
        "native_dropout",
    }
)

# The structural ops, with their meaning.
PRIM_OPS = {
    "prim.state": "read a parameter, buffer or constant of the program by name",
    "prim.guard": "check that a value equals what the trace saw, else raise GuardError",
    "prim.size": "the size of a tensor along a dimension (a traced integer)",
    "prim.numel": "the number of elements of a tensor (a traced integer)",
    "prim.dtype": "the dtype of a tensor",
    "prim.device": "the device of a tensor",
    "prim.tolist": "a tensor as nested Python numbers",
    "prim.item": "the one element of a tensor as a Python number",
    "prim.bool": "a tensor or scalar turned into a Python bool",
    "prim.int": "a tensor or scalar turned into a Python int",
    "prim.float": "a tensor or scalar turned into a Python float",
    "prim.len": "the length of a sequence",
    "prim.stride": "the stride of a tensor along a dimension (a traced integer)",
    "prim.requires_grad": "whether a tensor requires grad",
    "prim.is_contiguous": "whether a tensor is contiguous in memory",
    "prim.grad_enabled": "whether autograd is on for this call (the caller's mode)",
}
SCALAR_OPS: dict[str, Callable] = {
    "scalar.add": operator.add,
    "scalar.sub": operator.sub,
    "scalar.mul": operator.mul,
    "scalar.truediv": operator.truediv,
    "scalar.floordiv": operator.floordiv,
    "scalar.mod": operator.mod,
    "scalar.pow": operator.pow,
    "scalar.neg": operator.neg,
    "scalar.abs": operator.abs,
    "scalar.eq": operator.eq,
    "scalar.ne": operator.ne,
    "scalar.lt": operator.lt,
    "scalar.le": operator.le,
    "scalar.gt": operator.gt,
    "scalar.ge": operator.ge,
    "scalar.and": operator.and_,
    "scalar.or": operator.or_,
    "scalar.lshift": operator.lshift,
    "scalar.rshift": operator.rshift,
    "scalar.ceil": math.ceil,
    "scalar.xor": operator.xor,
    "scalar.invert": operator.invert,
    "scalar.round": round,
    "scalar.trunc": math.trunc,
    "scalar.sqrt": math.sqrt,
    "scalar.log": math.log,
    "scalar.log2": math.log2,
    "scalar.log10": math.log10,
    "scalar.exp": math.exp,
    "scalar.floor": math.floor,
}


def _attr_getter(name: str) -> Callable:
    def get(tensor):
        return getattr(tensor, name)

    get.__name__ = f"get_{name}"
    return get


def _public_callables(namespace) -> list[tuple[str, object]]:
    out = []
    for name in dir(namespace):
        if name in DENIED or name in SPECIAL:
            continue
        obj = getattr(namespace, name, None)
        if callable(obj) and not isinstance(obj, type):
            out.append((name, obj))
    return out


def _build():
    name_of: dict[object, str] = {}  # the recorded callable -> canonical op name
    impl: dict[str, Callable] = {}

    def add(obj, name, fn):
        name_of.setdefault(obj, name)
        impl.setdefault(name, fn)

    functions = torch._C._VariableFunctions
    for name, fn in _public_callables(functions):
        if name.startswith("__"):
            continue
        add(fn, name, fn)
    nn_ns = torch._C._nn
    for name, fn in _public_callables(nn_ns):
        if name.startswith("__"):
            continue
        canonical = name if name not in impl else f"nn.{name}"
        add(fn, canonical, fn)
    for prefix, ns in (
        ("linalg", torch._C._linalg),
        ("fft", torch._C._fft),
        ("special", torch._C._special),
    ):
        for name, fn in _public_callables(ns):
            if not name.startswith("_"):
                short = name.split("_", 1)[1] if name.startswith(f"{prefix}_") else name
                add(fn, f"{prefix}.{short}", fn)

    tensor = torch.Tensor
    # Builtin methods of the C base class first: some have a Python override on
    # torch.Tensor (unflatten, split) that calls them, and they must be ops too.
    methods = _public_callables(torch._C.TensorBase)
    methods += [
        (n, f)
        for n, f in _public_callables(tensor)
        if getattr(torch._C.TensorBase, n, None) is not f
    ]
    for name, fn in methods:
        if name in DUNDER_OPS:
            target = DUNDER_OPS[name]
            if target in ("getitem", "setitem"):
                add(fn, target, fn)
            elif target in impl:
                name_of.setdefault(fn, target)
            else:
                add(fn, target, getattr(tensor, target.split(".", 1)[1]))
            continue
        if name.startswith("__") and name not in OWN_DUNDERS:
            continue
        if name.startswith("_"):
            continue
        is_builtin = type(fn).__name__ in (
            "method_descriptor",
            "wrapper_descriptor",
            "builtin_function_or_method",
        )
        if not is_builtin and name not in OWN_DUNDERS:
            continue  # a Python method: the tracer descends into it
        if name in FOLDED_METHODS and name in impl:
            name_of.setdefault(fn, name)
        else:
            add(fn, f"Tensor.{name}", fn)
    # ``with torch.no_grad():`` inside traced code reaches us as this call; replaying it
    # keeps gradients off exactly where the code had them off.
    add(torch._C._set_grad_enabled, "set_grad_enabled", torch._C._set_grad_enabled)
    for name in TENSOR_OP_PROPERTIES:
        impl.setdefault(f"Tensor.{name}", _attr_getter(name))
    for name, fn in SCALAR_OPS.items():
        impl[name] = fn
    return name_of, impl


NAME_OF, IMPL = _build()
# Properties are read through getset descriptors; the tracer sees ``descriptor.__get__``.
PROPERTY_OF = {
    getattr(torch._C.TensorBase, name): name
    for name in ("shape", "dtype", "device", *TENSOR_OP_PROPERTIES, *TENSOR_META_PROPERTIES)
    if hasattr(torch._C.TensorBase, name)
}


def canonical_name(func) -> str | None:
    """The op name for a callable the tracer saw, or None if it is not an op."""
    try:
        return NAME_OF.get(func)
    except TypeError:  # unhashable callables are never ops
        return None


def property_name(func) -> str | None:
    """For a property getter (``Tensor.shape.__get__``), the property's name."""
    owner = getattr(func, "__self__", None)
    if owner is None or type(func).__name__ != "method-wrapper":
        return None
    try:
        return PROPERTY_OF.get(owner)
    except TypeError:
        return None


def impl_of(name: str) -> Callable:
    """The function that runs op ``name``; KeyError for a name outside the op set."""
    return IMPL[name]


def is_known(name: str) -> bool:
    return name in IMPL or name in PRIM_OPS


def is_inplace(name: str) -> bool:
    base = name.rsplit(".", 1)[-1]
    return name == "setitem" or (base.endswith("_") and not base.endswith("__"))


def meaning(name: str) -> str:
    """A one-line meaning of an op, from the op set or PyTorch's own docstring."""
    if name in PRIM_OPS:
        return PRIM_OPS[name]
    if name in SCALAR_OPS:
        return f"Python scalar {name.split('.', 1)[1]} on traced numbers"
    doc = (getattr(IMPL.get(name), "__doc__", None) or "").strip().splitlines()
    for line in doc[1:4]:
        if line.strip():
            return line.strip()
    return doc[0] if doc else ""


def all_names() -> list[str]:
    return sorted(set(IMPL) | set(PRIM_OPS))
