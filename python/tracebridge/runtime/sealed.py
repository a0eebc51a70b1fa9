"""Sealed state: a loaded artifact skips the per-call check of its state until the state
could have reached anyone else.

Note: why a loaded artifact may skip the check, and what ends that.
  A traced or loaded module keeps the values it folds from its state live
  (runtime/folding.py): each call checks every state tensor they read (its identity in
  its slot, its type, version and data pointer) and the types of the state the code reads
  (runtime/lean.py, ``StateTypes``), since the caller may assign, move, load or write the
  module's tensors at any time. That check is the largest cost a loaded convnet pays over
  torch.jit (mobilenet_v3_small: about 330 us a call right after another model ran, 77
  warm; densenet121 keys on 355 tensors). ``tracebridge.freeze`` skips it by owning a
  private copy of the state (runtime/frozen.py).

  A loaded artifact (``tracebridge.load``, and so an unpickled or deep-copied traced
  object, which ``load`` makes) needs no copy: its state tensors were made by the loader,
  and nothing outside tracebridge holds them. Until one of them is handed to code outside
  tracebridge, none can have been written, replaced, moved or given another type, so the
  folded values made once stay right and the state's types stay plain. The object's state
  tables (every sub-module's ``_parameters`` and ``_buffers``, a loaded module's
  ``_tb_constants``, a loaded function's constants) are :class:`SealedDict`\\ s, sharing
  one :class:`Seal`. Each path that can hand a state tensor out, or put one in, breaks the
  seal, and a broken seal is never restored: from then on every call checks as an
  unsealed object's does (the check keys on the state as it was when the values were
  made, so a write before the first checked call is seen too). The paths:

  - a Python-level read or write of a table: ``__getitem__`` (``m.weight``: nn.Module's
    ``__getattr__`` reads ``_parameters[name]``), ``get``, ``items``, ``values``,
    ``keys``, iteration (so ``dict(d)`` and ``{**d}`` take the slow path through them),
    ``copy``, ``pop``, ``popitem``, ``setdefault``, assignment, deletion, ``update``,
    ``clear``, ``|``, ``|=``, pickling and copying. That covers ``parameters()``,
    ``buffers()`` and their ``named_`` forms, ``state_dict()``, ``load_state_dict``,
    ``_apply`` (``.to()``, ``.double()``, ``.cuda()``, ``share_memory()``,
    ``requires_grad_()``, ``zero_grad()``), assignment (``m.weight = p``),
    ``torch.func.functional_call``, parametrizations, pruning, weight norm, and whatever a
    hook or ``apply(fn)`` does with the module; R reaches the state through these too
    (``$parameters``, ``$state_dict()``, printing a module; its calls with named
    arguments read the graphs under ``_tb_program``, which does not break it);
  - ``traced.program``: the program's state entries share memory with the module's
    tensors (``nn.Parameter(entry.tensor)``);
  - a call with autograd: the output's ``grad_fn`` reaches a parameter that requires grad
    (``AccumulateGrad.variable``), and any state tensor that autograd saves for backward
    where an input requires grad (``grad_fn._saved_other``, the pack hook of
    ``torch.autograd.graph.saved_tensors_hooks``; prober23a F5). It breaks when the code
    for such calls is made, at the first of them (runtime/method.py).

  tracebridge's own reads (the generated code's ``S[key]``, the folded values' and the
  state types' checks, saving, pickling, the module tree) use ``dict``'s own C methods,
  which do not break it. Breaking it turns each table into an :class:`OpenDict` (the same
  dict, its class changed), whose reads cost what a plain dict's cost.

  Never sealed: a fresh trace (its state is the user's module's), a program whose graphs
  write their state or may return memory of it (``frozen.state_stays_fixed``: a batch norm
  in training mode, a step counter, ``return self.weight``), the interpreter runtime.

  What the seal does not cover, as the unsealed check does not either: writes nobody
  records (``.data`` of a tensor reached by ``dict.__getitem__(vars(m)["_parameters"],
  ...)``, ``gc.get_objects()`` or ``gc.get_referents`` of a table, and other reaching past
  the tables' methods; a memory-mapped file written in
  place by another process, which moves no version either). What a call still checks: the
  default dtype, ``invalidate_caches()``, a torch function mode or autocast around the
  call, and everything else (inputs, guards, the module tree, hooks).
"""

from __future__ import annotations

_get = dict.__getitem__
_items = dict.items


class Seal:
    """Whether the state of one loaded object has stayed tracebridge's alone (``intact``),
    and its tables."""

    __slots__ = ("intact", "tables")

    def __init__(self):
        self.intact = True
        self.tables: list[SealedDict] = []

    def __repr__(self) -> str:
        return f"<seal: {'intact' if self.intact else 'broken'}, {len(self.tables)} tables>"

    def break_(self) -> None:
        """Break the seal, for good: every table becomes an :class:`OpenDict`."""
        self.intact = False
        for table in self.tables:
            table.__class__ = OpenDict
        self.tables = []


class OpenDict(dict):
    """A state table whose seal is broken: a dict (the slot layout of
    :class:`SealedDict`, so that the class can change in place)."""

    __slots__ = ("_tb_seal",)

    def __reduce_ex__(self, protocol):
        return dict, (dict(_items(self)),)

    def __copy__(self):
        return dict(_items(self))

    def __deepcopy__(self, memo):
        import copy

        return copy.deepcopy(dict(_items(self)), memo)


def _breaking(name: str):
    method = getattr(dict, name)

    def broken_then(self, *args, **kwargs):
        self._tb_seal.break_()
        return method(self, *args, **kwargs)

    broken_then.__name__ = name
    broken_then.__doc__ = f"``dict.{name}``, after breaking the seal."
    return broken_then


class SealedDict(dict):
    """A state table of a loaded object (see the module Note): every Python-level read or
    write breaks its seal first, then acts as ``dict``'s."""

    __slots__ = ("_tb_seal",)

    for _name in (
        "__getitem__ get items values keys __iter__ __reversed__ copy pop popitem setdefault "
        "__setitem__ __delitem__ update clear __or__ __ror__ __ior__"
    ).split():
        locals()[_name] = _breaking(_name)
    del _name

    def __reduce_ex__(self, protocol):
        self._tb_seal.break_()
        return dict, (dict(_items(self)),)

    def __reduce__(self):
        return self.__reduce_ex__(2)

    def __copy__(self):
        self._tb_seal.break_()
        return dict(_items(self))

    def __deepcopy__(self, memo):
        import copy

        self._tb_seal.break_()
        return copy.deepcopy(dict(_items(self)), memo)


def sealed_table(table: dict, seal: Seal) -> SealedDict:
    """A :class:`SealedDict` with ``table``'s entries, under ``seal``."""
    made = SealedDict(_items(table))
    made._tb_seal = seal
    seal.tables.append(made)
    return made


def seal_modules(root, constants: str = "_tb_constants") -> Seal:
    """Seal the state tables of ``root`` (a loaded TracedModule) and of every module under
    it (before its methods read their slots); its table of constants too."""
    seal = Seal()
    seen: set[int] = set()
    for module in root.modules():
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name in ("_parameters", "_buffers"):
            module.__dict__[name] = sealed_table(module.__dict__[name], seal)
    root.__dict__[constants] = sealed_table(root.__dict__[constants], seal)
    return seal


def seal_table(owner, attribute: str) -> Seal:
    """Seal one state table, ``owner.<attribute>`` (a loaded TracedFunction's constants)."""
    seal = Seal()
    owner.__dict__[attribute] = sealed_table(owner.__dict__[attribute], seal)
    return seal


def is_sealed(obj) -> bool:
    """Whether ``obj`` (a traced or loaded object) runs with its state sealed now."""
    seal = getattr(obj, "__dict__", {}).get("_tb_seal")
    return seal is not None and seal.intact


_SEALED_TYPES = (SealedDict, OpenDict)


def reader(owners) -> object:
    """The function that reads a slot of ``owners`` (state tables) without breaking a
    seal: ``dict.__getitem__`` where every one is a sealed (or once sealed) table, else
    ``operator.getitem`` (a table of the user's module: its own ``__getitem__``, if any)."""
    import operator

    if owners and all(type(owner) in _SEALED_TYPES for owner in owners):
        return _get
    return operator.getitem


def peek(table, key, default=None):
    """``table.get(key, default)``, without breaking a seal (see :func:`reader`)."""
    if type(table) in _SEALED_TYPES:
        return dict.get(table, key, default)
    return table.get(key, default)
