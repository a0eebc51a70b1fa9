"""What published library code asks of a tracer, answered while tracebridge traces.

Note: library code keeps a trace-friendly path for tracers.
  transformers skips its "nothing is padded" shortcut when ``torch.jit.is_tracing()``
  (``torch._C._is_tracing()`` underneath): its general path records a graph that is right
  for every input, where the shortcut would record a guard. So while a tracer of this
  thread records, that check answers True -- but only to code outside PyTorch: PyTorch's
  own modules read it to drive TorchScript's tracer, which must not start.
  ``torch.compiler.is_exporting()`` answers True to timm (``_EXPORT_SAME_RESULT``), for
  the same reason: timm marks with it the paths that "avoid Python branches on input shape
  or data that would specialize the exported graph to the example input" and that "must
  produce the same result as the non-export path" (``timm.layers.is_exporting``), so it
  resamples a ViT's position table on every call there instead of returning early when the
  patch count is the example's: a trace made at one image size is right at others. Other
  libraries make no such promise and keep the real answer: transformers builds an explicit
  mask when exporting where it would pass none, and Autoformer's mask path then fails
  (its masked path reshapes its correlation by the key length). ``is_compiling()`` stays
  False: its paths call dynamo's own operators (``associative_scan``).
  ``torch._C._get_tracing_state()`` is left alone: torchvision's paths behind it are
  written for TorchScript's tracer, where sizes are tensors (``torch.stack`` of sizes);
  tracebridge's sizes are traced ints, and torchvision's ordinary paths record general
  graphs (their ``torch.sym_int`` and ``torch.unique`` are handled below).

  Library assertions (``torch._assert``, ``torch._check``, ``torch._check_is_size``,
  ``torch._assert_async``) state what a model accepts. A comparison of traced sizes inside
  one is already a guard; these give that guard the library's own message, and a tensor
  condition becomes a guard on its truth value, checked on every call.

  A custom ``torch.autograd.Function`` (``SomeFunction.apply``) is recorded as one node,
  ``prim.autograd_function``, holding a traced forward graph and a traced backward graph
  that the runtime rebuilds as an autograd function: gradients are the function's own
  (trace/autograd_function.py says how, and what is refused at trace time with the
  function's name and line). Recording its forward ops instead would give autograd's
  gradient of those ops; that is done only where no gradient can flow (no-grad mode, no
  input requiring grad) and the function cannot be a node, guarded at call time.
"""

from __future__ import annotations

import os
import sys

import torch

from ..errors import UnsupportedOpError
from ..source import OWN_DIR, TORCH_DIR
from .aliases import AliasHandlers
from .autograd_function import AutogradFunctions
from .selections import SelectionHandlers, unique_results

_JIT_TRACE = os.path.join(TORCH_DIR, "jit", "_trace.py")

_original_is_tracing = torch._C._is_tracing
_original_is_exporting = torch.compiler.is_exporting
_original_has_torch_function = torch.overrides.has_torch_function
_original_grad_enabled = torch._C.is_grad_enabled
# Modules whose fused inference path (eager's, in evaluation without autograd) records ops
# of the op set: nn.MultiheadAttention's ``_native_multi_head_attention`` and
# nn.TransformerEncoderLayer's ``_transformer_encoder_layer_fwd``. Not
# nn.TransformerEncoder's: its fast path makes nested tensors, which no graph holds.
_FAST_PATHS = frozenset(
    {
        torch.nn.MultiheadAttention.forward.__code__,
        torch.nn.TransformerEncoderLayer.forward.__code__,
    }
)
# Their module types: a module holding one in evaluation mode, traced with autograd on,
# is traced again without it (api.py, ``_without_autograd``), as eager takes the fused path
# there.
FAST_PATH_MODULES = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer)
# The fused ops of those paths: op name, and the module named in the guard's message.
_FUSED = {
    torch._native_multi_head_attention: ("_native_multi_head_attention", "nn.MultiheadAttention"),
    torch._transformer_encoder_layer_fwd: (
        "_transformer_encoder_layer_fwd",
        "nn.TransformerEncoderLayer",
    ),
}
_original_check = torch._check
_original_check_tensor_all = torch._check_tensor_all
_original_check_tensor_all_with = torch._check_tensor_all_with
_original_module_to = torch.nn.Module.to
_original_apply = torch.autograd.Function.__dict__["apply"]  # a classmethod object


def _active():
    from .patches import _tracers  # patches installs this module: import late

    stack = _tracers.stack
    return stack[-1] if stack else None


def _asked_by_library() -> bool:
    """Whether the code asking is outside PyTorch (``torch.jit.is_tracing`` itself is a
    PyTorch frame that only passes the question on). ``torch.jit._script_if_tracing``'s
    wrapper asks for PyTorch: answered True, it would run the function through
    TorchScript, out of the recorder's sight, and what it computed from the inputs would
    reach the trace as a constant (torchvision's ``batched_nms``: every detector's boxes)."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename == _JIT_TRACE or frame.f_code.co_filename.startswith(OWN_DIR)
    ):
        if frame.f_code is _SCRIPT_IF_TRACING:
            return False
        frame = frame.f_back
    return frame is not None and not frame.f_code.co_filename.startswith(TORCH_DIR)


# The code of the wrapper ``torch.jit._script_if_tracing`` puts around a function (one code
# object for every function it wraps).
_SCRIPT_IF_TRACING = torch.jit._script_if_tracing(lambda: None).__code__


def _is_tracing() -> bool:
    if _active() is not None and _asked_by_library():
        return True
    return _original_is_tracing()


# Code whose export paths promise the eager result without branching on sizes: the paths
# (parts of a file name) of the libraries ``torch.compiler.is_exporting()`` answers True to.
_EXPORT_SAME_RESULT = (f"{os.sep}timm{os.sep}",)


def _is_exporting() -> bool:
    if _active() is not None:
        caller = sys._getframe(1).f_code.co_filename
        if any(part in caller for part in _EXPORT_SAME_RESULT):
            return True
    return _original_is_exporting()


def _message(message) -> str | None:
    if message is None:
        return None
    try:
        return str(message() if callable(message) else message)
    except Exception:  # a message that cannot be built must not break tracing
        return None


def _as_traced(message: str) -> str:
    """A library's message as a guard quotes it: built when the trace ran, so any size it
    shows (``f"Expected {H}, got {h}"``) is the trace's, not that of the call that breaks
    the guard; it says so rather than read as that call's sizes."""
    return f"the library's message when traced: {message}"


def _has_torch_function(args) -> bool:
    """PyTorch's check before a fused fast path: the recording mode makes it True, so a
    trace took the slow path where eager takes the fast one. For the modules in
    ``_FAST_PATHS``, traced without autograd, it answers False: the fused op is recorded
    (with a guard that autograd is off, see ``_on_fused_path``)."""
    if (
        _active() is not None
        and sys._getframe(1).f_code in _FAST_PATHS
        and not _original_grad_enabled()
    ):
        return False
    return _original_has_torch_function(args)


def _check(cond, message=None):
    tracer = _active()
    if tracer is not None and isinstance(cond, bool):
        tracer.label_last_guard(cond, _message(message))
    return _original_check(cond, message)


def _check_tensor_all(cond, message=None):
    return _check_tensor_all_with(RuntimeError, cond, message)


def _check_tensor_all_with(error_type, cond, message=None):
    """``torch._check_tensor_all`` (transformers' ``torch_compilable_check`` calls it while
    a tracer records, for a condition that is a tensor: VITS's spline flow checks its
    inputs' range): eager reads ``cond._is_all_true().item()``, a private op and a value
    read. Recorded as a guard that ``cond.all()`` is True, with the library's message,
    checked on every call, as a failed check raises in eager."""
    tracer = _active()
    if tracer is None or not isinstance(cond, torch.Tensor):
        return _original_check_tensor_all_with(error_type, cond, message)
    with torch._C.DisableTorchFunction():  # reading the dtype here is no guard
        is_bool = cond.dtype == torch.bool
    if not is_bool:
        return _original_check_tensor_all_with(error_type, cond, message)  # its TypeError
    return tracer.check_tensor_all(error_type, cond, message)


def _module_to(module, *args, **kwargs):
    """``nn.Module.to`` in traced code (Switch Transformers' router runs
    ``self.classifier = self.classifier.to(self.dtype)`` on every call): where every
    parameter and buffer already has that device and dtype it changes nothing, in eager as
    in the trace, and returns the module; a conversion that would change them is refused,
    naming the line, since the graph reads the model's state and cannot convert it."""
    tracer = _active()
    if tracer is None:
        return _original_module_to(module, *args, **kwargs)
    with torch._C.DisableTorchFunction():
        device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*module.parameters(), *module.buffers()]
        unchanged = memory_format is None and all(
            _same_device(t.device, device)
            and (dtype is None or not (t.is_floating_point() or t.is_complex()) or t.dtype == dtype)
            for t in tensors
        )
    if unchanged:
        return module
    where = tracer.location() or "unknown location"
    raise UnsupportedOpError(
        f"cannot record {type(module).__name__}.to(...) at {where}: "
        "it would convert the module's parameters or buffers while tracing (device "
        f"{device}, dtype {dtype}, memory format {memory_format}), and a graph reads the "
        "model's state but does not convert it; convert the model before tracing "
        "(model.to(...)), so that this call changes nothing"
    )


def _same_device(have: torch.device, want: torch.device | None) -> bool:
    if want is None:
        return True
    return have.type == want.type and (want.index is None or want.index == have.index)


def _apply(cls, *args, **kwargs):
    apply = _original_apply.__get__(None, cls)
    tracer = _active()
    if tracer is None:
        return apply(*args, **kwargs)
    return tracer.custom_function(cls, apply, args, kwargs)


# Note: a function under ``torch.compile`` runs as plain Python while a tracer records.
#   Libraries compile helpers of their own (torchvision's ``_roi_align`` under
#   ``lazy_compile(dynamic=True)``, taken where its C++ kernels are missing): dynamo then
#   runs the helper's frame itself, and the recording mode sees ops of dynamo's making, or
#   none, with results that come from nowhere (a two-stage detector was refused as "not
#   stable" at roi_align.py:281). ``torch.compile``'s contract is that the compiled code
#   computes what the Python code computes, so the trace records that code:
#   ``torch.compiler.set_stance("force_eager")`` while recording, the stance before put
#   back after. Inside a compiled region the stance cannot change, and is left as it is.
_stance: object | None = None  # the set_stance object whose ``prev`` is the user's stance


def _compiled_code_runs_eagerly(on: bool) -> None:
    global _stance
    if on and _stance is None:
        try:
            _stance = torch.compiler.set_stance("force_eager")
        except RuntimeError:  # traced inside a torch.compile region
            _stance = None
    elif not on and _stance is not None:
        _stance.__exit__(None, None, None)
        _stance = None


def patch(on: bool) -> None:
    """Install (``on``) or remove the answers above; called with the builtins' patches."""
    _compiled_code_runs_eagerly(on)
    torch._C._is_tracing = _is_tracing if on else _original_is_tracing
    torch.compiler.is_exporting = _is_exporting if on else _original_is_exporting
    torch.overrides.has_torch_function = _has_torch_function if on else _original_has_torch_function
    torch._check = _check if on else _original_check
    torch._check_tensor_all = _check_tensor_all if on else _original_check_tensor_all
    torch._check_tensor_all_with = _check_tensor_all_with if on else _original_check_tensor_all_with
    torch.nn.Module.to = _module_to if on else _original_module_to
    torch.autograd.Function.apply = classmethod(_apply) if on else _original_apply


class LibraryHandlers(AutogradFunctions, SelectionHandlers, AliasHandlers):
    """Handlers for library calls the recording mode sees (mixed into the Tracer);
    ``custom_function`` (``Function.apply``) comes from trace/autograd_function.py."""

    def _library_handlers(self) -> dict:
        handlers = {
            torch._assert: self._on_assert,
            torch._assert_async: self._on_assert,
            torch.sym_int: self._on_sym_int,
            torch.sym_float: self._on_sym_float,
            torch.device: self._on_device,
            torch.unique: self._on_unique,
            torch.functional.unique: self._on_unique,
            torch.Tensor.unique: self._on_unique,
            **{fused: self._on_fused_path for fused in _FUSED},
            torch._C.TensorBase.where: self._on_tensor_where,
            torch._C.TensorBase.new: self._on_legacy_new,
            torch._C.TensorBase._is_all_true: self._on_all_true,
            torch._C.TensorBase._is_any_true: self._on_all_true,
            torch._softmax_backward_data: self._on_softmax_backward,
            torch._log_softmax_backward_data: self._on_log_softmax_backward,
        }
        for name in ("conj", "conj_physical"):
            handlers[getattr(torch, name)] = self._on_conj
            handlers[getattr(torch.Tensor, name)] = self._on_conj
        for name in ("resolve_conj", "resolve_neg"):
            handlers[getattr(torch, name)] = self._on_resolve
            handlers[getattr(torch.Tensor, name)] = self._on_resolve
        handlers.update(self._selection_handlers())  # nonzero(as_tuple), unique_consecutive
        handlers.update(self._alias_handlers())  # torch.lu, chain_matmul, adjoint
        return handlers

    def label_last_guard(self, cond: bool, message: str | None) -> None:
        """A library assertion on a condition the trace just guarded (a comparison of
        sizes): give that guard the library's message, so a call that breaks it says what
        the library says."""
        if not message:
            return
        # The message itself may have been formatted from traced sizes since (an f-string
        # records guards of its own): look back over value nodes and guards only.
        for node in reversed(self.graph.nodes):
            if not node.op.startswith(("prim.", "scalar.")):
                return
            kwargs = node.kwargs
            if node.op == "prim.guard" and kwargs.get("kind") == "branch":
                if kwargs.get("expect") is cond and not kwargs.get("what", "").endswith(")"):
                    kwargs["what"] = f"{kwargs['what']} ({_as_traced(message)})"
                return

    def _on_assert(self, func, condition, message=None, *rest):
        message = _message(message) or "assertion failed"
        if not isinstance(condition, torch.Tensor):
            if isinstance(condition, bool):
                self.label_last_guard(condition, message)
            if not condition:
                raise AssertionError(message)
            return None
        with torch._C.DisableTorchFunction():
            concrete = bool(condition)
        loc = self.location()
        ref = self._value_node("prim.bool", "bool", [self.tensor_ref(condition)], loc)
        what = f"{self._name(condition)} ({_as_traced(message)})"
        self.guard(ref, True, what, "branch", loc)
        if not concrete:
            raise AssertionError(message)
        return None

    def check_tensor_all(self, error_type: type, cond: torch.Tensor, message=None) -> None:
        """``torch._check_tensor_all_with(error_type, cond, message)`` while recording (see
        ``_check_tensor_all_with``): ``all(cond)`` recorded, and a guard that it is True."""
        message = _message(message) or "Expected cond to be True"
        every = cond.all()  # called from traced code, where the recording mode is active
        with torch._C.DisableTorchFunction():
            concrete = bool(every)
        loc = self.location()
        ref = self._value_node("prim.bool", "bool", [self.tensor_ref(every)], loc)
        what = f"{self._name(every)} ({_as_traced(message)})"
        self.guard(ref, True, what, "branch", loc)
        if not concrete:
            raise error_type(message)

    def _on_all_true(self, func, tensor):
        """``Tensor._is_all_true()`` and ``_is_any_true()``, the private ops behind
        ``torch._check_tensor_all``: on a bool tensor (the only kind they take) they are
        ``all`` and ``any``, and are recorded so."""
        name = "all" if func is torch._C.TensorBase._is_all_true else "any"
        with torch._C.DisableTorchFunction():
            is_bool = tensor.dtype == torch.bool
        if not is_bool:
            return func(tensor)  # PyTorch's own error for another dtype
        return self.record(name, getattr(torch, name), (tensor,), {})

    def _on_legacy_new(self, func, tensor, *args, **kwargs):
        """The legacy constructor ``x.new(*sizes)`` (or ``x.new(torch.Size)``): a tensor of
        those sizes with ``x``'s dtype and device and unspecified contents (Reformer's
        ``sorted_bucket_idx.new(*sorted_bucket_idx.size())``, filled by ``scatter_`` next),
        recorded as ``Tensor.new_empty``, which runs zero-filled. Its other forms (from
        data, a tensor or a storage) are refused, naming the line."""
        sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
        if all(isinstance(n, int) and not isinstance(n, bool) for n in sizes) and set(kwargs) <= {
            "device"
        }:
            return self.record(
                "Tensor.new_empty", torch.Tensor.new_zeros, (tensor, list(sizes)), kwargs
            )
        raise UnsupportedOpError(
            f"cannot record the legacy constructor Tensor.new(...) at {self.location()} with "
            "these arguments: only x.new(*sizes) and x.new(torch.Size) are recorded (as "
            "x.new_empty(sizes)); write x.new_tensor(data) or x.new_empty(sizes) instead"
        )

    def _on_fused_path(self, func, *args, **kwargs):
        """A module's fused path (``_FUSED``), recorded where eager takes it (evaluation,
        no autograd). It has no gradient: the graph guards that autograd is off, so a call
        with autograd raises GuardError instead of failing in backward."""
        op, module = _FUSED[func]
        loc = self.location()
        ref = self._value_node("prim.grad_enabled", "bool", loc=loc)
        what = f"torch.is_grad_enabled() ({module}'s fused path, traced without autograd)"
        self.guard(ref, False, what, "branch", loc)
        return self.record(op, func, args, kwargs)

    def _on_tensor_where(self, func, tensor, condition, other):
        """``x.where(condition, y)`` is ``torch.where(condition, x, y)``: the method puts
        the tensor first, the function the condition, so the method cannot fold by name
        (Longformer's and LED's band masks call it); recorded as the function's ``where``."""
        return self.record("where", torch.where, (condition, tensor, other), {})

    def _on_softmax_backward(self, func, grad_output, output, dim, input_dtype):
        """``torch._softmax_backward_data``, a private kernel that custom autograd functions
        call in their backward (transformers' ``XSoftmax`` in SEW-D and DeBERTa): recorded
        as the public ops it computes, ``output * (grad - sum(grad * output, dim))``, so the
        function keeps its own gradient and the graph holds no private op."""
        dtype = self._kernel_dtype(func, grad_output, output, dim, input_dtype)
        with self.mode:
            inner = (grad_output * output).sum(dim, keepdim=True)
            return (output * (grad_output - inner)).to(dtype)

    def _on_log_softmax_backward(self, func, grad_output, output, dim, input_dtype):
        """``torch._log_softmax_backward_data``, recorded as the public ops it computes:
        ``grad - exp(output) * sum(grad, dim)``."""
        dtype = self._kernel_dtype(func, grad_output, output, dim, input_dtype)
        with self.mode:
            inner = grad_output.sum(dim, keepdim=True)
            return (grad_output - output.exp() * inner).to(dtype)

    def _on_conj(self, func, input):
        """``torch.conj`` and ``conj_physical`` (transformers' Autoformer correlates with
        ``rfft(q) * conj(rfft(k))``), recorded as the public ops they compute: on a complex
        tensor ``complex(real, -imag)``, the same values as eager's lazily conjugated view;
        on a real one nothing (eager's ``conj`` returns the tensor itself), so the op set
        needs no new op for them. A tensor's dtype kind is fixed by the trace's guards."""
        with torch._C.DisableTorchFunction():
            complex_input = input.is_complex()
        with self.mode:
            if complex_input:
                return torch.complex(input.real, -input.imag)
            return input if func in (torch.conj, torch.Tensor.conj) else input.clone()

    def _on_resolve(self, func, input):
        """``resolve_conj`` and ``resolve_neg`` materialise a lazy conjugate or negation;
        the recorded ops make none (``_on_conj``), so the values are the input's. Eager gives
        back the input itself where its bit is not set: a later write or read of the bit
        guards that it stays unset (trace/returned_inputs.py). Where the bit is set (a
        conjugate view given as an input), eager makes a copy: so does the trace, for the
        calls whose input has the bit too (guarded)."""
        bit = "conj" if func in (torch.resolve_conj, torch.Tensor.resolve_conj) else "neg"
        with torch._C.DisableTorchFunction():
            is_set = input.is_conj() if bit == "conj" else input.is_neg()
        if not is_set:
            self.note_resolved(input, bit)
            return input
        what = f"{self._name_of(input)}.is_{bit}() (resolve_{bit}() copied it when traced)"
        self._guard_flag(f"prim.is_{bit}", input, True, what)
        return self.record("clone", torch.clone, (input,), {})

    @staticmethod
    def _kernel_dtype(func, *args) -> torch.dtype:
        """The kernel itself on the example, unrecorded: it checks its arguments as eager
        does (shapes, dim, dtypes; the public ops recorded instead would broadcast), and its
        result's dtype is the one the recorded ops end in."""
        with torch._C.DisableTorchFunction():
            return func(*args).dtype

    def _on_sym_int(self, func, a):
        """``torch.sym_int``: truncation of a traced float stays traced (interpolate's
        output size from a scale factor)."""
        from .numbers import SymFloat, SymInt

        if isinstance(a, SymInt):
            return a
        if isinstance(a, SymFloat):
            return self.scalar_op("trunc", (a,))
        return int(a)

    def _on_sym_float(self, func, a):
        from .numbers import _Traced

        if isinstance(a, _Traced):
            return self.scalar_op("mul", (a, 1.0))
        return float(a)

    def _on_device(self, func, *args, **kwargs):
        """``torch.device(x.device)`` is the device of ``x``, read at run time like
        ``x.device`` itself."""
        result = func(*args, **kwargs)
        if len(args) == 1 and not kwargs and isinstance(args[0], torch.device):
            read = self._device_reads.get(id(args[0]))
            if read is not None and read[0] is args[0]:
                self._device_reads[id(result)] = (result, read[1])
        return result

    def _on_unique(
        self,
        func,
        input,
        sorted=True,
        return_inverse=False,
        return_counts=False,
        dim=None,
    ):
        """``torch.unique`` is a Python wrapper that re-dispatches to itself; record the
        op it runs (``_unique2``, or ``unique_dim`` along a dimension)."""
        if dim is None:
            kwargs = {
                "sorted": sorted,
                "return_inverse": return_inverse,
                "return_counts": return_counts,
            }
            result = self.record("_unique2", torch._unique2, (input,), kwargs)
        else:
            kwargs = {
                "dim": dim,
                "sorted": sorted,
                "return_inverse": return_inverse,
                "return_counts": return_counts,
            }
            unique_dim = torch._C._VariableFunctions.unique_dim  # no torch.unique_dim in 2.x
            result = self.record("unique_dim", unique_dim, (input,), kwargs)
        return unique_results(result, return_inverse, return_counts)
