"""A module with parameters constructed inside the traced code: refused at its line.

Note: why it is refused, and where.
  ``emb = nn.Embedding(100, 8)`` inside ``forward`` makes new parameters, initialised at
  random, on every call: eager answers differ from call to call, and no graph can stand for
  that (torch.jit.trace bakes the first call's weights as constants, silently). Left to the
  recording, the refusal came from deep inside the constructor's initialisation
  (``cannot record Tensor.normal_ ... with the keyword 'tensor'``, prober20a F5), naming
  neither the module nor what to do. So while tracing, a global parameter-registration
  hook refuses the registration of a parameter on a module whose ``__init__`` is running
  (a module under construction), naming its class, the line constructing it, and the fix:
  make it once in ``__init__``. Modules without parameters (``nn.ReLU()(x)``,
  ``nn.Identity()``) make nothing random and are traced as they are; a module of the
  traced tree registering a parameter outside its constructor is another matter (state
  changes, check/state_growth.py).
"""

from __future__ import annotations

import sys

from torch.nn.modules import module as _torch_module

from ..errors import TraceError
from ..source import user_frame
from . import helpers
from .patches import BUILTIN_PATCHES

_handle: list = []


def _constructing_frame(module):
    """The outermost running ``__init__`` frame of ``module``, or None."""
    found = None
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if (
            code.co_name == "__init__"
            and code.co_argcount
            and frame.f_locals.get(code.co_varnames[0]) is module
        ):
            found = frame
        frame = frame.f_back
    return found


def _refuse_made_module(module, name, param):
    if helpers.active_tracer() is None:
        return None
    init = _constructing_frame(module)
    if init is None:
        return None
    site = user_frame(init.f_back)
    where = f"{site.f_code.co_filename}:{site.f_lineno}" if site is not None else "its caller"
    kind = type(module).__name__
    raise TraceError(
        f"a module ({kind}) is constructed inside the traced code, at {where}: its parameters "
        f"({name!r} first) are made anew, initialised at random, on every call, so eager "
        "answers differ from call to call and no trace can stand for them. Construct it "
        f"once in the module's __init__ (self.x = {kind}(...)) and call that in forward"
    )


def _install(on: bool) -> None:
    if on:
        _handle.append(
            _torch_module.register_module_parameter_registration_hook(_refuse_made_module)
        )
    elif _handle:
        _handle.pop().remove()


BUILTIN_PATCHES.hooks.append(_install)
