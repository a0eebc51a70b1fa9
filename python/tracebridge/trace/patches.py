"""Builtins that must see traced sizes: ``len``, ``range``, ``operator.index``, ``math.*``,
``torch.is_grad_enabled`` (and ``int`` in the traced code's modules: trace/integers.py);
and calls into TorchScript, which runs out of the recorder's sight.

The patches live behind one object, :data:`BUILTIN_PATCHES`, whose lifetime is the
``recording`` block: installed when the first thread starts tracing, removed when the
last one stops; the patched functions look for a tracer of their own thread, so other
threads see the originals' behaviour.
"""

from __future__ import annotations

import builtins
import cmath
import contextlib
import copyreg
import math
import operator
import sys
import threading
import types
from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedOpError
from ..ir import ops as opset
from ..ir.dtypes import DTYPE_NAMES
from ..source import called_from_user_code as _called_from_user_code
from . import autocast_state, helpers, library, math_calls, message_sinks, python_random
from .integers import traced_index
from .numbers import SymSize, _Traced, modular_pow

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer

# --- builtins that need to see traced sizes ----------------------------------------------

_original_len = builtins.len
_original_range = builtins.range


class _ActiveTracers(threading.local):
    def __init__(self):
        self.stack: list[Tracer] = []


_tracers = _ActiveTracers()  # per thread: another thread's len() is never recorded


_original_pow = builtins.pow


def _traced_pow(base, exp, mod=None):
    """``pow`` while tracing: with a modulus and a traced number among the three, Python's
    C code would read the number's value unseen (``pow(2, n, 5)`` tries no method of ``n``):
    recorded as ``(base ** exp) % mod`` instead (trace/numbers.py)."""
    if mod is None or not (
        _tracers.stack and any(isinstance(v, _Traced) for v in (base, exp, mod))
    ):
        return _original_pow(base, exp) if mod is None else _original_pow(base, exp, mod)
    return modular_pow(base, exp, mod)


def _traced_len(obj):
    active = _tracers.stack
    if not active:
        return _original_len(obj)
    if isinstance(obj, torch.Tensor):
        return active[-1].size_of(obj, 0) if obj.dim() > 0 else _original_len(obj)
    method = getattr(type(obj), "__len__", None)
    if not isinstance(method, types.FunctionType):
        return _original_len(obj)
    # A Python ``__len__`` (a dataset, a user sequence) may answer a traced size: len()
    # copies it into a plain int in C, unseen, so it is called here and a traced answer
    # is given back as it is (a size: recorded, general); another is checked as len() does.
    length = method(obj)
    if isinstance(length, _Traced):
        if not isinstance(length, int):
            raise TypeError(
                f"'{type(length._concrete()).__name__}' object cannot be interpreted as an integer"
            )
        if not active[-1].scalar_compare("ge", length, 0, warn=False):
            raise ValueError("__len__() should return >= 0")
        return length
    length = operator.index(length)
    if length < 0:
        raise ValueError("__len__() should return >= 0")
    return length


class _TracedRangeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _original_range)


class _traced_range(metaclass=_TracedRangeMeta):  # noqa: N801 - stands in for builtins.range
    """``range`` while tracing: a traced bound fixes the loop's length, so guard on it."""

    stands_for = _original_range

    def __new__(cls, *args):
        active = _tracers.stack
        if active and any(isinstance(a, _Traced) for a in args):
            return _unrolled(active[-1], *args)
        return _original_range(*args)


def _unrolled(tracer: Tracer, *args):
    """The values of ``range(*args)`` with traced bounds, for a loop the trace unrolls.

    What fixes the unrolled code is the number of steps, so that is what is guarded, not
    each bound: ``range(0, n, n)`` (transformers' EnCodec cuts its input into chunks of
    the whole length) is one step for every ``n``. The values are traced where a bound
    they depend on is (``start + i * step``), plain where they are constants: ``range(n)``
    gives 0, 1, ... and guards ``n`` as before. The result is a tuple: code that needs a
    ``range`` object (``r.start``) of traced bounds is rare.
    """
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if (step._concrete() if isinstance(step, _Traced) else step) == 0:
        raise ValueError("range() arg 3 must not be zero")  # as range itself says

    def positive(n) -> bool:  # a traced comparison is guarded where it is made
        return tracer.scalar_compare("gt", n, 0, warn=False) if isinstance(n, _Traced) else n > 0

    plain_start, plain_step = not isinstance(start, _Traced), not isinstance(step, _Traced)
    if plain_start and plain_step and start == 0 and step == 1:
        count = stop  # the count is the bound itself
    else:
        forward = positive(step)
        gap = stop - start if forward else start - stop
        stride = step if forward else -step
        count = (gap + stride - 1) // stride if positive(gap) else 0
    if isinstance(count, _Traced):
        concrete = count._concrete()
        tracer.guard(tracer.scalar_ref(count), concrete, count._desc, "loop", tracer.location())
        tracer.warn(
            f"a Python loop over the traced size {count._desc} is unrolled "
            f"for {concrete}; calls with another size raise GuardError"
        )
        count = concrete
    if plain_start and plain_step:
        return tuple(_original_range(start, start + count * step, step))
    return tuple(start if i == 0 else start + i * step for i in _original_range(max(count, 0)))


# ``torch.Size(sizes)`` reads each size with ``__index__`` in C: built from traced sizes
# (torch.distributions' sample shapes, ``torch.Size(sample_shape + batch_shape)``) it would
# fix them all. While tracing, one built from traced sizes is what ``x.shape`` is, a
# SymSize (trace/numbers.py), whose ``numel()`` is traced (torch.Size's reads the sizes in
# C). ``isinstance(s, torch.Size)`` holds for both; what does not, while a trace runs, is
# code that compares the class by identity: ``type(s) is torch.Size``. ``pickle`` finds a class
# by name (``torch.Size``) and refused a torch.Size while the stand-in is there, in any
# thread of the process ("not the same object as torch.Size"): :func:`_size_pickling`
# pickles one as a call of the stand-in, which carries torch.Size's name, so the bytes
# are torch.Size's and load as a torch.Size anywhere.
_original_size = torch.Size


class _TracedSizeMeta(type):
    # ``x.shape`` is a SymSize while tracing (trace/numbers.py): a torch.Size, for code
    # that asks (``isinstance(shape, torch.Size)`` took the other branch)
    def __instancecheck__(cls, obj):
        return isinstance(obj, (_original_size, SymSize))

    def __subclasscheck__(cls, sub):
        return issubclass(sub, (_original_size, SymSize))

    def __getattr__(cls, name):  # torch.Size.numel, torch.Size.__add__, ...
        return getattr(_original_size, name)


class _traced_size(metaclass=_TracedSizeMeta):  # noqa: N801 - stands in for torch.Size
    """``torch.Size`` while tracing: traced sizes in it stay traced (see above)."""

    def __new__(cls, sizes=()):
        if not _tracers.stack or isinstance(sizes, torch.Tensor):
            return _original_size(sizes)
        items = tuple(sizes)  # a list, a tuple, a generator of sizes (read once)
        if not any(isinstance(d, _Traced) for d in items):
            return _original_size(items)
        # PyTorch's own checks of the items, on their values (no guard): ints only.
        _original_size(d._concrete() if isinstance(d, _Traced) else d for d in items)
        return SymSize(items)  # as x.shape is: torch.Size's numel() would read them in C


# Pickled by name, the stand-in is torch.Size: ``torch.Size((2, 3))`` in the bytes.
_traced_size.__module__, _traced_size.__qualname__ = "torch", "Size"


def _reduce_size(size: torch.Size) -> tuple:
    return _traced_size, (tuple(int(d) for d in size),)


def _size_pickling(on: bool) -> None:
    """While the stand-in is ``torch.Size`` (``on``), pickle a torch.Size through it."""
    if on:
        copyreg.dispatch_table[_original_size] = _reduce_size
    elif copyreg.dispatch_table.get(_original_size) is _reduce_size:
        del copyreg.dispatch_table[_original_size]


# math functions read an int's value in C without a hook: while tracing, each records a
# scalar op for a traced number (math.sqrt(head_dim), math.cos(t.item())) or guards it
# (trace/math_calls.py says which).
_MATH_OPS = tuple(math_calls.names())
_original_math = {name: getattr(math, name) for name in _MATH_OPS}
_original_is_grad_enabled = torch.is_grad_enabled


def _traced_math(name: str):
    original = _original_math[name]

    def traced(*args, **kwargs):
        active = _tracers.stack
        if active:
            return math_calls.call(active[-1], name, original, args, kwargs)
        return original(*args, **kwargs)

    traced.__name__ = name
    traced.__doc__ = original.__doc__
    return traced


def _guarded_cmath(name: str):
    original = getattr(cmath, name)

    def traced(*args, **kwargs):
        active = _tracers.stack
        if active:
            return math_calls.guarded_call(active[-1], f"cmath.{name}", original, args, kwargs)
        return original(*args, **kwargs)

    traced.__name__ = name
    traced.__doc__ = original.__doc__
    return traced


def _traced_is_grad_enabled() -> bool:
    """``torch.is_grad_enabled()`` in the user's code is a decision: guard on it."""
    mode = _original_is_grad_enabled()
    active = _tracers.stack
    if active and _called_from_user_code():
        tracer = active[-1]
        loc = tracer.location()
        ref = tracer._value_node("prim.grad_enabled", "bool", loc=loc)
        tracer.guard(ref, mode, "torch.is_grad_enabled()", "branch", loc)
    return mode


_original_is_inference_mode_enabled = torch.is_inference_mode_enabled


def _traced_is_inference_mode_enabled() -> bool:
    """``torch.is_inference_mode_enabled()`` in the user's code is a decision on the
    caller's mode: guarded (op-set 8). Inside the code's own ``torch.inference_mode()``
    block it is on whatever the caller's mode, as the trace has it: no guard."""
    mode = _original_is_inference_mode_enabled()
    active = _tracers.stack
    if active and _called_from_user_code() and not active[-1].inference_blocks:
        tracer = active[-1]
        loc = tracer.location()
        ref = tracer._value_node("prim.inference_mode", "bool", loc=loc)
        tracer.guard(ref, mode, "torch.is_inference_mode_enabled()", "branch", loc)
    return mode


def _setting_read(original, setting: str, positions: tuple | None = None, name_of=None):
    """A read of a process-wide setting in the user's code (``torch.get_num_threads()``,
    ``torch.cuda.is_available()``...): its answer decided what the code did, so it is
    guarded (op-set 9, ``prim.setting``), once per answer. ``positions``: where the answer
    is not a number or bool, the graph holds its position there (``name_of`` gives the
    answer's name in it: the matmul precision, the default dtype)."""

    def traced(*args, **kwargs):
        real = original(*args, **kwargs)
        if _tracers.stack and _called_from_user_code():
            call = "" if getattr(original, "is_attribute", False) else "()"
            what = f"{_qualified(original)}{call}"
            _guard_setting(setting, real, what, positions, name_of)
        return real

    traced.__name__ = original.__name__
    traced.__doc__ = original.__doc__
    return traced


def _guard_setting(setting: str, real, what: str, positions=None, name_of=None) -> None:
    """Guard the answer ``real`` of the setting read as ``what`` (once per answer)."""
    tracer = _tracers.stack[-1]
    kind = opset.SETTINGS[setting]
    value = real
    what = f"{what} ({setting})"
    if positions is not None:  # the graph holds a position: say what it stands for
        name = name_of(real) if name_of else real
        if name not in positions:
            raise UnsupportedOpError(
                f"{what} is {real!r}, which a trace cannot hold (one of {positions}), at "
                f"{tracer.location()}: trace under one of those, or pass the value to the code"
            )
        value = positions.index(name)
        what = f"{what}, {real!r} as position {value} of {positions}"
    if (setting, value) not in tracer.setting_guards:
        tracer.setting_guards.add((setting, value))
        loc = tracer.location()
        ref = tracer._value_node("prim.setting", kind, [setting], loc)
        tracer.guard(ref, value, what, "branch" if kind == "bool" else "value", loc)


def _traced_default_device(original):
    """``torch.get_default_device()`` in the user's code: a graph holds no device, so its
    type (a position in DEVICE_TYPES) and its index (-1 for none) are two settings, each
    guarded; factories the code calls without a device follow the default by themselves."""

    def traced():
        real = original()
        if _tracers.stack and _called_from_user_code():
            what = "torch.get_default_device()"
            _guard_setting("default_device_type", real.type, f"{what}.type", opset.DEVICE_TYPES)
            index = -1 if real.index is None else real.index
            _guard_setting("default_device_index", index, f"{what}.index (-1: none)")
        return real

    traced.__name__ = original.__name__
    traced.__doc__ = original.__doc__
    return traced


class _SettingProperty:
    """``torch.backends.cudnn.enabled`` and its kind while tracing: a read in the user's
    code is guarded as :func:`_setting_read`'s are; a write goes to torch's own property."""

    def __init__(self, original, module: str, attribute: str, setting: str):
        def read():
            return original.__get__(None, None)

        read.__module__, read.__name__ = module, attribute  # the guard's message names it
        read.is_attribute = True
        self.original = original
        self.read = _setting_read(read, setting)

    def __get__(self, obj, objtype=None):
        return self.read()

    def __set__(self, obj, value):
        self.original.__set__(obj, value)


class _PlainModuleSetting:
    """``torch.backends.opt_einsum.enabled`` and ``.strategy`` while tracing. torch keeps
    them as plain attributes (its module class names no property for them), so this
    descriptor goes on the module's class while tracing: a read in the user's code is
    guarded as :func:`_setting_read`'s are, a write lands where torch's own write lands
    (the module's dict), and ``torch.einsum``'s own read is not the user's."""

    def __init__(self, module, attribute: str, setting: str, positions=None, name_of=None):
        def read():
            return _plain_module_attribute(module, attribute)

        read.__module__, read.__name__ = module.__name__, attribute
        read.is_attribute = True
        self.attribute = attribute
        self.read = _setting_read(read, setting, positions, name_of)

    def __get__(self, obj, objtype=None):
        return self if obj is None else self.read()

    def __set__(self, obj, value):
        vars(obj)[self.attribute] = value


def _plain_module_attribute(module, attribute: str):
    """An attribute of one of torch.backends' stand-in modules (``PropModule``) as torch
    reads it, without a descriptor on its class: the module's own dict (a user's write),
    else the wrapped module's."""
    own = vars(module)
    return own[attribute] if attribute in own else getattr(module.m, attribute)


def _strategy_name(strategy) -> str:
    return "none" if strategy is None else strategy


def _qualified(function) -> str:
    module = function.__module__ or "torch"
    return f"{'torch' if module == 'torch' else module}.{function.__name__}"


_SETTING_FUNCTIONS = [  # (owner, name, setting[, positions, name_of]): see _setting_read
    (torch, "get_num_threads", "num_threads"),
    (torch, "get_num_interop_threads", "num_interop_threads"),
    (torch, "get_float32_matmul_precision", "float32_matmul_precision", opset.MATMUL_PRECISIONS),
    (torch, "are_deterministic_algorithms_enabled", "deterministic_algorithms"),
    (
        torch,
        "is_deterministic_algorithms_warn_only_enabled",
        "deterministic_algorithms_warn_only",
    ),
    (torch.cuda, "is_available", "cuda_available"),
    # torch.autograd.detect_anomaly() switches these: code may take a debugging path
    (torch, "is_anomaly_enabled", "anomaly_enabled"),
    (torch, "is_anomaly_check_nan_enabled", "anomaly_check_nan"),
    (torch, "get_default_dtype", "default_dtype", opset.DEFAULT_DTYPES, DTYPE_NAMES.get),
    (torch.backends.cuda, "math_sdp_enabled", "math_sdp_enabled"),
    (torch.backends.cuda, "flash_sdp_enabled", "flash_sdp_enabled"),
    (torch.backends.cuda, "mem_efficient_sdp_enabled", "mem_efficient_sdp_enabled"),
    (torch.backends.cuda, "cudnn_sdp_enabled", "cudnn_sdp_enabled"),
    # nn.MultiheadAttention's fast path; torch.set_warn_always's switch (prober19b F3)
    (torch.backends.mha, "get_fastpath_enabled", "mha_fastpath_enabled"),
    (torch, "is_warn_always_enabled", "warn_always"),
]
# Settings that are attributes of torch.backends' modules (``torch.backends.cudnn.enabled``):
# a descriptor of the module's class reads them (backends.ContextProp).
_SETTING_PROPERTIES = [  # (module, attribute, setting)
    (torch.backends.cudnn, "enabled", "cudnn_enabled"),
    (torch.backends.cudnn, "allow_tf32", "cudnn_allow_tf32"),
    (torch.backends.cudnn, "deterministic", "cudnn_deterministic"),
    (torch.backends.cudnn, "benchmark", "cudnn_benchmark"),
    (torch.backends.mkldnn, "enabled", "mkldnn_enabled"),
]
# opt_einsum's flags, plain attributes of its stand-in module (see _PlainModuleSetting)
_PLAIN_SETTINGS = [  # (module, attribute, setting[, positions, name_of])
    (torch.backends.opt_einsum, "enabled", "opt_einsum_enabled"),
    (
        torch.backends.opt_einsum,
        "strategy",
        "opt_einsum_strategy",
        opset.OPT_EINSUM_STRATEGIES,
        _strategy_name,
    ),
]
# cuBLAS's flags, which ``torch.backends.cuda.matmul``'s class answers in ``__getattr__``
_MATMUL_SETTINGS = {
    "allow_tf32": "cublas_allow_tf32",
    "allow_fp16_reduced_precision_reduction": "cublas_allow_fp16_reduced_precision",
    "allow_bf16_reduced_precision_reduction": "cublas_allow_bf16_reduced_precision",
}


def _matmul_getattr(original):
    """``cuBLASModule.__getattr__`` while tracing: the user's reads of the flags above are
    guarded as the other settings' are."""
    reads = {}
    for name, setting in _MATMUL_SETTINGS.items():

        def read(name=name):
            return original(torch.backends.cuda.matmul, name)

        read.__module__, read.__name__ = "torch.backends.cuda.matmul", name
        read.is_attribute = True
        reads[name] = _setting_read(read, setting)

    def traced(self, name):
        read = reads.get(name)
        return read() if read is not None else original(self, name)

    return traced


if torch.distributed.is_available():
    _SETTING_FUNCTIONS.append((torch.distributed, "is_initialized", "distributed_initialized"))

_TRACED_MATH = {name: _traced_math(name) for name in _MATH_OPS}


# --- torch.inference_mode --------------------------------------------------------------------
# ``torch.no_grad()`` switches grad mode through ``torch._C._set_grad_enabled``, which the
# recorder sees and records; ``torch.inference_mode()`` enters a C context the recorder
# never sees, so the graph ran its block with autograd on: results that eager returns
# without ``requires_grad`` came back requiring it. Its block is recorded as a block with
# grad mode off (its values are then ordinary tensors that do not require grad, where eager
# makes inference tensors: the same values, usable in more places).


def _annotation_enter(self):
    """``record_function.__enter__`` while recording: no profiler event (see below)."""
    return self


def _annotation_exit(self, *exc_info):
    return None  # an exception goes on


_original_inference_enter = torch.inference_mode.__enter__
_original_inference_exit = torch.inference_mode.__exit__


def _no_switch(mode) -> None:
    """The grad switch's own effect, left to the inference-mode context itself."""


def _inference_enter(self):
    active = _tracers.stack
    if active and self.mode:
        active[-1]._on_set_grad_enabled(_no_switch, False)
        active[-1].inference_blocks += 1
    return _original_inference_enter(self)


def _inference_exit(self, *exc_info):
    result = _original_inference_exit(self, *exc_info)
    active = _tracers.stack
    if active and self.mode:
        active[-1]._on_set_grad_enabled(_no_switch, _original_is_grad_enabled())
        active[-1].inference_blocks -= 1
    return result


# --- the caller's autocast ----------------------------------------------------------------
# What the user's code reads of it is guarded; the regions the code opens guard the
# caller's autocast for their device (trace/autocast_state.py). torch reads the state for
# itself (in ``torch.autocast.__enter__``): that read stays torch's.

_original_autocast_enter = torch.amp.autocast_mode.autocast.__enter__
_original_autocast_exit = torch.amp.autocast_mode.autocast.__exit__


def _device_type(args: tuple, kwargs: dict, default: str) -> str:
    return args[0] if args else kwargs.get("device_type", default)


def _autocast_read(original, read, device: str):
    """A read of the caller's autocast as the user's code gets it, guarded
    (``torch.is_autocast_enabled(d)``, ``torch.get_autocast_dtype(d)``, and the older
    per-device ``torch.is_autocast_cpu_enabled()``...); ``device``: the device type read
    where the call names none (``torch.is_autocast_enabled()`` reads CUDA's)."""

    def traced(*args, **kwargs):
        real = original(*args, **kwargs)
        active = _tracers.stack
        if active and _called_from_user_code():
            return read(active[-1], _device_type(args, kwargs, device), real)
        return real

    traced.__name__ = original.__name__
    traced.__doc__ = original.__doc__
    return traced


def _autocast_enter(self):
    result = _original_autocast_enter(self)
    active = _tracers.stack
    if active and not torch._jit_internal.is_scripting():
        autocast_state.region_entered(active[-1], self)
    return result


def _autocast_exit(self, *exc_info):
    active = _tracers.stack
    if active and not torch._jit_internal.is_scripting():
        autocast_state.region_left(active[-1], self)
    return _original_autocast_exit(self, *exc_info)


# --- TorchScript called from traced code ----------------------------------------------------
# A scripted function or module runs its ops in TorchScript's interpreter, out of the
# recorder's sight: what it computes from the inputs would reach the trace as a constant.

_original_script_function_call = torch.jit.ScriptFunction.__call__
_original_script_module_call = torch.jit.ScriptModule.__call__


def _script_function_call(self, *args, **kwargs):
    """A ``@torch.jit.script`` function called while tracing runs its Python original
    (TorchScript keeps it for torch.compile as ``_torchdynamo_inline``), so its ops are
    recorded as the function's own; one without it is refused, naming the line."""
    active = _tracers.stack
    if not active:
        return _original_script_function_call(self, *args, **kwargs)
    original = getattr(self, "_torchdynamo_inline", None)
    if callable(original):
        return original(*args, **kwargs)
    raise UnsupportedOpError(
        f"cannot record a call to the TorchScript function {self.qualified_name} at "
        f"{active[-1].location()}: TorchScript runs its ops where the tracer cannot see "
        "them, and this one keeps no Python original; call the Python function it was "
        "scripted from"
    )


def _script_module_call(self, *args, **kwargs):
    """A scripted module (``torch.jit.script(module)``, ``torch.jit.load``) called while
    tracing is refused, naming the line: TorchScript keeps no Python module to run."""
    active = _tracers.stack
    if not active:
        return _original_script_module_call(self, *args, **kwargs)
    raise UnsupportedOpError(
        f"cannot record a call to the TorchScript module {self.original_name} at "
        f"{active[-1].location()}: TorchScript runs its ops where the tracer cannot see "
        "them; trace the Python module it was scripted from (before torch.jit.script), or "
        "call it outside the traced code"
    )


# --- effects the graph cannot hold: seeding the global generator, autograd's engine --------
# ``torch.manual_seed`` in forward (fixed noise drawn under ``torch.random.fork_rng``) and
# ``torch.autograd.grad`` in forward (forces as the gradient of an energy) run out of the
# recorder's sight: the seed is not in the graph, so its random ops would draw from the
# caller's generator; the gradient comes back from autograd's engine as a tensor no
# recorded op made, a constant of the example. Either way the trace would compute
# something else than the code, which the trace check then found with no word of why.
# Called from the user's code while tracing, they are refused, naming the line.

_original_manual_seed = torch.manual_seed
_original_random_manual_seed = torch.random.manual_seed
_original_seed = torch.seed
_original_random_seed = torch.random.seed
_original_autograd_grad = torch.autograd.grad
_original_tensor_backward = torch.Tensor.backward


def _refuse_in_trace(name: str, why: str):
    active = _tracers.stack
    if active and _called_from_user_code():
        raise UnsupportedOpError(
            f"cannot record {name} at {active[-1].location() or 'unknown location'}: {why}"
        )


_SEEDING = (
    "seeding the global random generator inside traced code is not recorded (a graph "
    "holds no generator state), so the random ops after it would draw from the caller's "
    "generator, not from this seed, and the trace would compute other numbers than the "
    "code; draw the fixed values once outside the traced code (a buffer made in "
    "__init__) or pass them as an input"
)
_GRADIENT = (
    "autograd's engine computes the gradient out of the recorder's sight, so the trace "
    "would hold the example's gradient as a constant; tracebridge records forward "
    "operations only: compute the gradient outside the traced code (trace the energy, "
    "then differentiate the traced module's output), or write the derivative out with "
    "tensor operations"
)


def refusing(original, name: str, why: str):
    """``original``, refused (``why``) where the user's code calls it while tracing; the
    seeding functions here, the generators' state put back in trace/global_effects.py."""

    def refused(*args, **kwargs):
        _refuse_in_trace(name, why)
        return original(*args, **kwargs)

    refused.__doc__ = original.__doc__
    refused.__wrapped__ = original
    return refused


def _traced_autograd_grad(*args, **kwargs):
    _refuse_in_trace("torch.autograd.grad", _GRADIENT)
    return _original_autograd_grad(*args, **kwargs)


def _traced_backward(self, *args, **kwargs):
    _refuse_in_trace("Tensor.backward", _GRADIENT)
    return _original_tensor_backward(self, *args, **kwargs)


# --- hash(tensor) for a cache key ---------------------------------------------------------
# ``Tensor.__hash__`` is ``id(self)`` and skips ``__torch_function__``: the recording mode
# never sees it. While tracing it asks the tracer, which misses a functools cache whose key
# holds the tensor (trace/caches.py); everywhere else it is the identity, as before.

_original_tensor_hash = torch.Tensor.__hash__


def _traced_tensor_hash(self):
    active = _tracers.stack
    if active and active[-1].is_active():
        return active[-1].tensor_hash(self)
    return _original_tensor_hash(self)


class BuiltinPatches:
    """Every function tracebridge replaces while tracing, behind one object.

    Invariant: the replacements are installed exactly while at least one thread is inside
    ``recording`` (``acquire``/``release`` count them), and removing them puts back the very
    objects that were there before. Each replacement looks for a tracer of its own thread,
    so a thread that is not tracing sees the original behaviour even while they are in.
    ``hooks`` are called with ``True``/``False`` at install/removal, for patches that need
    more than a setattr.
    """

    def __init__(self):
        self._entries: list[tuple[object, str, object, object]] = []
        self._inherited: set[tuple[type, str]] = set()  # a class's entry from a base class
        self.hooks: list = []
        self._lock = threading.Lock()
        self._depth = 0

    def add(self, owner, name: str, replacement) -> None:
        """Replace ``owner.name`` by ``replacement`` while tracing. A class's own entry is
        taken as it is stored (a descriptor, a staticmethod), not as reading it gives it; a
        class that has no entry of its own (an inherited one, or none: opt_einsum's module
        class) has it only while tracing."""
        own = isinstance(owner, type) and name in vars(owner)
        if isinstance(owner, type) and not own:
            # a base class's entry, or none at all: removed again, not stored on the class
            original = getattr(owner, name, None)
            self._inherited.add((owner, name))
        else:
            original = vars(owner)[name] if own else getattr(owner, name)
        self._entries.append((owner, name, original, replacement))

    @property
    def installed(self) -> bool:
        return self._depth > 0

    def acquire(self) -> None:
        with self._lock:
            if self._depth == 0:
                try:
                    self._set(True)
                except BaseException:
                    self._set(False)  # nothing may stay replaced for later code to meet
                    raise
            self._depth += 1

    def release(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._set(False)

    def _set(self, on: bool) -> None:
        """Install or remove every replacement; one that fails does not stop the others
        (its error is raised after all were tried)."""
        if on:
            _dynamo_builtins(self._entries, repair=False)  # settled before ours go in
        failed: BaseException | None = None
        for owner, name, original, replacement in self._entries:
            try:
                if not on and (owner, name) in self._inherited:
                    delattr(owner, name)  # the base class's entry (or none) shows through again
                else:
                    setattr(owner, name, replacement if on else original)
            except Exception as exc:  # noqa: BLE001 - raised below, after the others
                failed = failed or exc
        for hook in self.hooks:
            try:
                hook(on)
            except Exception as exc:  # noqa: BLE001
                failed = failed or exc
        if not on:
            _dynamo_builtins(self._entries, repair=True)
        if failed is not None:
            raise failed


def _dynamo_builtins(entries, repair: bool) -> None:
    """Keep torch.compile's table of ``builtins.*`` / ``operator.*`` functions the real
    ones. Dynamo reads that table from ``builtins`` the first time it needs it; if that
    happens while a trace has ``len`` replaced (traced code calling ``torch.vmap`` imports
    Dynamo), it would keep our replacements and no longer know the real ``len``: every
    later ``torch.compile`` or ``torch.export`` in the process breaks on it. So the table is
    made before ours go in, where Dynamo is loaded, and mended after they come out."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    table = getattr(rules, "_builtin_function_ids", None)
    if table is None:
        return
    try:
        table()  # made now from the real builtins, if it was not yet
        if not repair:
            return
        ids, names = table.function_ids, table.function_names
        for owner, name, original, replacement in entries:
            if owner not in (builtins, operator):
                continue
            ids.discard(id(replacement))
            names.pop(id(replacement), None)
            ids.add(id(original))
            names[id(original)] = f"{owner.__name__}.{name}"
    except (AttributeError, TypeError):  # another torch: its table works otherwise
        return


BUILTIN_PATCHES = BuiltinPatches()
BUILTIN_PATCHES.add(builtins, "len", _traced_len)
BUILTIN_PATCHES.add(builtins, "range", _traced_range)
BUILTIN_PATCHES.add(builtins, "pow", _traced_pow)
BUILTIN_PATCHES.add(operator, "index", traced_index)
for _name in _MATH_OPS:
    BUILTIN_PATCHES.add(math, _name, _TRACED_MATH[_name])
for _name in math_calls.names(cmath):
    BUILTIN_PATCHES.add(cmath, _name, _guarded_cmath(_name))
BUILTIN_PATCHES.add(torch, "is_grad_enabled", _traced_is_grad_enabled)
BUILTIN_PATCHES.add(torch, "is_inference_mode_enabled", _traced_is_inference_mode_enabled)
for _owner, _name, *_read in _SETTING_FUNCTIONS:
    BUILTIN_PATCHES.add(_owner, _name, _setting_read(getattr(_owner, _name), *_read))
for _module, _name, _setting in _SETTING_PROPERTIES:
    _property = vars(type(_module))[_name]
    _replacement = _SettingProperty(_property, _module.__name__, _name, _setting)
    BUILTIN_PATCHES.add(type(_module), _name, _replacement)
for _module, _name, *_plain in _PLAIN_SETTINGS:
    BUILTIN_PATCHES.add(type(_module), _name, _PlainModuleSetting(_module, _name, *_plain))
BUILTIN_PATCHES.add(torch, "get_default_device", _traced_default_device(torch.get_default_device))
_cublas = type(torch.backends.cuda.matmul)
BUILTIN_PATCHES.add(_cublas, "__getattr__", _matmul_getattr(vars(_cublas)["__getattr__"]))
for _name, _read, _device in (
    ("is_autocast_enabled", autocast_state.read_enabled, "cuda"),
    ("get_autocast_dtype", autocast_state.read_dtype, "cuda"),
    ("is_autocast_cpu_enabled", autocast_state.read_enabled, "cpu"),
    ("get_autocast_cpu_dtype", autocast_state.read_dtype, "cpu"),
    ("get_autocast_gpu_dtype", autocast_state.read_dtype, "cuda"),
):
    BUILTIN_PATCHES.add(torch, _name, _autocast_read(getattr(torch, _name), _read, _device))
BUILTIN_PATCHES.add(torch.amp.autocast_mode.autocast, "__enter__", _autocast_enter)
BUILTIN_PATCHES.add(torch.amp.autocast_mode.autocast, "__exit__", _autocast_exit)
BUILTIN_PATCHES.add(torch, "Size", _traced_size)
BUILTIN_PATCHES.add(torch.inference_mode, "__enter__", _inference_enter)
BUILTIN_PATCHES.add(torch.inference_mode, "__exit__", _inference_exit)
# A profiling annotation (torch.profiler.record_function, which nn.DataParallel's forward
# opens too) changes no result: recorded through, it would be an op of the profiler's
BUILTIN_PATCHES.add(torch.autograd.profiler.record_function, "__enter__", _annotation_enter)
BUILTIN_PATCHES.add(torch.autograd.profiler.record_function, "__exit__", _annotation_exit)
BUILTIN_PATCHES.add(torch.jit.ScriptFunction, "__call__", _script_function_call)
BUILTIN_PATCHES.add(torch.jit.ScriptModule, "__call__", _script_module_call)
BUILTIN_PATCHES.add(
    torch, "manual_seed", refusing(_original_manual_seed, "torch.manual_seed", _SEEDING)
)
BUILTIN_PATCHES.add(
    torch.random,
    "manual_seed",
    refusing(_original_random_manual_seed, "torch.random.manual_seed", _SEEDING),
)
BUILTIN_PATCHES.add(torch, "seed", refusing(_original_seed, "torch.seed", _SEEDING))
BUILTIN_PATCHES.add(
    torch.random, "seed", refusing(_original_random_seed, "torch.random.seed", _SEEDING)
)
BUILTIN_PATCHES.add(torch.autograd, "grad", _traced_autograd_grad)
BUILTIN_PATCHES.add(torch.Tensor, "backward", _traced_backward)
BUILTIN_PATCHES.add(torch.Tensor, "__hash__", _traced_tensor_hash)
BUILTIN_PATCHES.hooks.append(library.patch)  # torch.jit.is_tracing & co
BUILTIN_PATCHES.hooks.append(_size_pickling)  # a torch.Size pickles while the stand-in is in
BUILTIN_PATCHES.hooks.append(helpers.patch)  # transformers' torch_int, torch_float
# Python's random: numbers drawn while tracing refuse to be used (trace/python_random.py)
BUILTIN_PATCHES.hooks.append(python_random.patcher(lambda: bool(_tracers.stack)))
BUILTIN_PATCHES.hooks.append(python_random.numpy_patcher(lambda: bool(_tracers.stack)))


@contextlib.contextmanager
def recording(tracer: Tracer):
    """Activate ``tracer`` in this thread: its mode, and the traced ``len``, ``range``,
    ``math.*`` and ``torch.is_grad_enabled`` (per thread: other threads see the originals'
    behaviour, as the patched functions look for a tracer of their own thread)."""
    _tracers.stack.append(tracer)
    try:
        BUILTIN_PATCHES.acquire()
    except BaseException:
        _tracers.stack.pop()
        raise
    try:
        with tracer.mode, message_sinks.streams_at_start():
            yield
    finally:
        _tracers.stack.pop()
        BUILTIN_PATCHES.release()
