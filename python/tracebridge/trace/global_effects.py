"""Calls in traced code that change what later code computes, out of the graph's sight:
the random generators' state put back or reseeded, and autograd's saved-tensor hooks.
Called from the user's code while tracing, they are refused, naming the line (as
``torch.manual_seed`` is: trace/patches.py), where they change the numbers: a state put
back (``torch.set_rng_state``, ``torch.random.fork_rng``) only where the code draws.

Note: why these. ``with torch.random.fork_rng(): noise = torch.randn_like(x)`` leaves the
caller's generator as it was: eager calls repeat their noise. The graph holds the draw but
not the state put back at the block's end, so each traced call drew new noise and moved
the caller's generator (silently wrong: the check compares outputs, which agree on the
example). ``torch.set_rng_state`` and the CUDA seeding functions are the same by hand.
``saved_tensors_hooks(pack, unpack)`` opened in forward changes what backward reads
(activation compression in int8, offloading): the trace records the forward ops only, so
its gradients were the hook-less ones, with no word of it. ``save_on_cpu``, which gives
back the tensors it saved, changes no number and stays allowed, as do hooks that torch's
own code opens (activation checkpointing).
"""

from __future__ import annotations

import contextlib
import inspect
import sys

import torch

from ..errors import UnsupportedOpError
from ..ir import ops as opset
from ..source import OWN_DIR, called_from_user_code
from .helpers import active_tracer
from .patches import BUILTIN_PATCHES, _refuse_in_trace, refusing

_original_set_rng_state = torch.set_rng_state
_original_fork_rng = torch.random.fork_rng

_RNG_STATE = (
    "putting back or reseeding a random generator inside traced code is not recorded (a "
    "graph holds no generator state): the random ops would draw from wherever the "
    "caller's generator stands, and each call would move it, where the code leaves it as "
    "it was; draw the values outside the traced code and pass them in, or let the traced "
    "code draw from the caller's generator without putting it back"
)
_SAVED_TENSORS = (
    "saved-tensor hooks change what backward reads out of the recorder's sight (a graph "
    "holds forward ops only), so gradients through the trace would use the tensors as "
    "saved, not what the hooks give back; trace without them (their forward results are "
    "the same) and apply them around the calls of the trace instead"
)


def _draws(tracer) -> int:
    return sum(map(opset.draws_random, tracer.graph.nodes))


def _recording_users_call():
    """The tracer recording in this thread, where the user's code made the current call
    (not tracebridge's own: its autograd-function and autocast handlers put states back
    around runs of their own)."""
    tracer = active_tracer()
    if tracer is None or not tracer.is_active():
        return None
    if sys._getframe(2).f_code.co_filename.startswith(OWN_DIR) or not called_from_user_code():
        return None
    return tracer


def _refuse(tracer, name: str, where: str | None) -> None:
    raise UnsupportedOpError(f"cannot record {name} at {where or 'unknown location'}: {_RNG_STATE}")


def _traced_set_rng_state(new_state):
    """``torch.set_rng_state`` while tracing: put back a state, which matters to the numbers
    only where the traced code draws; its place is remembered, and the recording is refused
    when it ends if any op drew (:func:`refuse_put_back_states`)."""
    tracer = _recording_users_call()
    if tracer is not None:
        tracer.rng_put_back.append(tracer.location())
    return _original_set_rng_state(new_state)


def refuse_put_back_states(tracer) -> None:
    """Called when a recording returns: a generator's state put back by the code, with a
    draw anywhere in the recording, makes the trace compute other numbers."""
    if tracer.rng_put_back and _draws(tracer):
        _refuse(tracer, "torch.set_rng_state", tracer.rng_put_back[0])


_fork_enabled = inspect.signature(_original_fork_rng).parameters


def _traced_fork_rng(*args, **kwargs):
    """``torch.random.fork_rng`` while tracing: refused where an op inside the block drew
    (its state put back at the end is what the graph cannot hold); a block that draws
    nothing puts back what it found, which no graph needs."""
    tracer = _recording_users_call()
    forked = _original_fork_rng(*args, **kwargs)
    bound = inspect.Signature(list(_fork_enabled.values())).bind(*args, **kwargs)
    if tracer is None or not bound.arguments.get("enabled", True):
        return forked
    return _checked_fork(forked, tracer, tracer.location())


@contextlib.contextmanager
def _checked_fork(forked, tracer, where):
    before = _draws(tracer)
    with forked:
        yield
        if _draws(tracer) > before:
            _refuse(tracer, "torch.random.fork_rng", where)


def _add(owners, name: str, replacement) -> None:
    original = getattr(owners[0], name)
    for owner in owners:  # each module's binding of the one function
        if getattr(owner, name) is original:
            BUILTIN_PATCHES.add(owner, name, replacement)


_add([torch, torch.random], "set_rng_state", _traced_set_rng_state)
_add([torch.random], "fork_rng", _traced_fork_rng)
# CUDA's generators, reseeded or put back: refused at once (the CPU functions above are
# what fork_rng and checkpointing call; code calls these only to choose its own numbers).
_CUDA_SEEDING = "set_rng_state set_rng_state_all manual_seed manual_seed_all seed seed_all"
for _name in _CUDA_SEEDING.split():
    _refused = refusing(getattr(torch.cuda, _name), f"torch.cuda.{_name}", _RNG_STATE)
    _add([torch.cuda, torch.cuda.random], _name, _refused)

_hooks = torch.autograd.graph.saved_tensors_hooks
_original_hooks_enter = vars(_hooks)["__enter__"]


def _hooks_enter(self):
    # torch's own subclasses (save_on_cpu) give back what they saved; a user's may not
    if type(self) is _hooks or not type(self).__module__.startswith("torch."):
        _refuse_in_trace("torch.autograd.graph.saved_tensors_hooks", _SAVED_TENSORS)
    return _original_hooks_enter(self)


BUILTIN_PATCHES.add(_hooks, "__enter__", _hooks_enter)
