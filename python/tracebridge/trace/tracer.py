"""The tracer: run the user's code once on example inputs and record what it does.

Note: how recording works.
  * A ``TorchFunctionMode`` sees every call into PyTorch's Python API. A call whose
    function is in the op set becomes one node; it runs for real (with the mode off), and
    each tensor it returns is mapped, by identity, to a new SSA value.
  * A Python composite that PyTorch routes through ``__torch_function__`` (``F.relu``,
    ``F.batch_norm``, ``Tensor.__iter__``) is not an op: we run a copy of it whose
    ``has_torch_function*`` checks answer False, with the mode on, so the builtins it
    calls are recorded and aliases fold by themselves.
  * Tensors are looked up by identity: inputs, then the module's parameters and buffers
    (bound by path, read through ``prim.state``), then anything else, which becomes a
    named constant with a warning.
  * Sizes are ``SymInt``s: ``int`` subclasses (PyTorch's argument parser accepts them
    without a hook) whose arithmetic is recorded, so ``x.view(x.size(0), -1)`` stays
    general. Turning a traced value into a Python value (``bool``, ``int``, a comparison
    used by ``if``, ``range``) records a ``prim.guard`` at the user's line.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ir.program import Graph, Ref, StateEntry, Value
from . import (  # noqa: F401 - their replacements join the patches
    global_effects,
    made_modules,
    transformer_encoder,
    unseen_writes,
)
from .conversions import Conversions
from .dispatch import Dispatcher, _RecordingMode
from .inplace import InPlace
from .library import LibraryHandlers
from .memo_tables import MemoTables
from .noops import NoOps
from .numbers import SymFloat, SymInt, SymSize, _Traced  # noqa: F401 - re-exported
from .patches import recording  # noqa: F401 - re-exported
from .recorder import Recorder
from .returned_inputs import ReturnedInputs


class Tracer(Dispatcher, Conversions, LibraryHandlers, InPlace, NoOps, ReturnedInputs, Recorder):
    """Records one call of ``fn`` into a :class:`Graph`.

    ``state`` maps ``id(tensor)`` to ``(name, kind)`` for the parameters and buffers of the
    module being traced; ``constants`` collects captured tensors (shared across methods).
    """

    def __init__(
        self,
        state: dict[int, tuple[str, str, torch.Tensor]],
        constants: dict[str, StateEntry],
        warned: set,
    ):
        self.graph = Graph()
        self._next_id = 0
        self._tensor_values: dict[int, tuple[torch.Tensor, Value, str]] = {}
        self._state = state
        self._state_refs: dict[str, Ref] = {}
        self._constants = constants
        self._dtype_reads: dict[torch.dtype, Callable[[], Ref]] = {}
        self._device_reads: dict[int, tuple[torch.device, Callable[[], Ref]]] = {}
        self._meta_refs: dict[tuple, Ref] = {}
        self._size_cache: dict[tuple[int, int], SymInt] = {}
        self._unseen_guarded: dict[tuple[int, str], object] = {}  # conversions.py
        self._unseen_later: list = []  # (number, frame, site) judged when the code returns
        self._unseen_blind: set[str] = set()  # files whose source the tracer cannot read
        self._warned = warned
        self._held_warnings: list | None = None  # recorder.py: held while user code runs
        self._descending: list = []
        self._dispatch_depth = 0  # calls of the recording mode under way (dispatch.py)
        # (function, user's file:line, exception) of each call of the traced code that
        # raised: where the code then returns, it caught the error (capture.py refuses)
        self.failed_calls: list[tuple[str, str | None, BaseException]] = []
        # identity tests of kept traced sizes eager answers True (conversions.py: refused)
        self.identity_refusals: list[str] = []
        # (object, attribute, line) of one-entry cache keys compared (trace/warm_caches.py)
        self.cache_keys: list[tuple] = []
        self.rng_put_back: list[str | None] = []  # set_rng_state's lines (global_effects)
        self._grad_entry: tuple[Ref, bool] | None = None
        self._grad_depth = 0
        # torch.inference_mode() blocks of the traced code entered and not left (patches.py)
        self.inference_blocks = 0
        # torch.autocast regions of the traced code open now, by device type, and the
        # guards on the caller's autocast made so far (trace/autocast_state.py)
        self.autocast_regions: list[str] = []
        self.autocast_guards: set = set()
        self.setting_guards: set = set()  # (setting, value) guarded (patches.py)
        self.caches_used: list = []  # functools caches a size went through (trace/caches.py)
        # The recording is over (capture.py): a traced number the code kept (a global list
        # of sizes) is a plain number from then on, outside any recording (conversions.py)
        self.finished = False
        self._tensor_hashes: dict[int, tuple] = {}  # tensors in functools cache keys
        self.memo_tables = MemoTables()  # dicts looked up with a traced key (memo_tables.py)
        self._facts_init()  # what is known of values on every call (trace/noops.py)
        self._inplace_init()  # what writes may be recorded out of place (trace/inplace.py)
        self._returned_init()  # conversions that gave back their input (returned_inputs.py)
        self.mode = _RecordingMode(self)
        self._handlers = self._special_handlers()
