"""A call's arguments, passed by position or by keyword, bound as the trace was made.

Note: Python binds ``m(x)`` and ``m(x=x)`` to the same parameter, and so does torch.jit's
traced module: a trace made with ``example_kwarg_inputs={"x": t}`` serves ``m(t)``, and
one made with ``(t,)`` serves ``m(x=t)``. The graph records its inputs as the example
passed them (``in_spec``: positional ones, then keywords by name), and the traced
callable's positional parameters by name (``arg_names``, kept in the file). A call that
passes a parameter the other way is moved to the traced way here, as
``inspect.Signature.bind`` would bind it:

* a positional argument past those traced positionally goes to the keyword of the
  parameter at its position, where the trace took that parameter by keyword and the call
  does not also name it;
* a keyword argument naming a parameter the trace took by position goes to its position,
  where the call passes every position before it.

Anything else is left as the call gave it, for the caller's refusal to describe (a
missing or an extra argument). Only calls whose structure differs from the traced one
come here: a call in the traced form pays nothing.

The graph's ``positional_only`` counts the leading ``arg_names`` that are positional-only
(``def f(x, /, y)``): a keyword naming one is never moved to its position, and a call that
passes one by keyword is refused with Python's own error (:class:`BindingError`, a
``TypeError``), unless the keyword lands in the callable's ``**kwargs`` (``var_keywords``),
as Python puts it there. A file made before the field counts none. ``arg_names`` does not
say which names stand for a ``*args`` parameter's entries (``args0``): a keyword call
naming one is bound by position, as no valid call of the traced code can be told apart
from it (it runs what the positional call runs).
"""

from __future__ import annotations


def bind_to_trace(
    args: tuple, kwargs: dict, in_spec: dict, arg_names: list[str], positional_only: int = 0
):
    """``(args, kwargs)`` moved between position and keyword to where the trace has them
    (module Note), or None where nothing moves.

    >>> spec = {"t": "tuple", "c": [{"t": "tuple", "c": []},
    ...                             {"t": "dict", "keys": ["x"], "c": [{"t": "leaf"}]}]}
    >>> bind_to_trace((1,), {}, spec, ["x"])
    ((), {'x': 1})
    """
    traced_args, traced_kwargs = in_spec["c"]
    positional = len(traced_args["c"])
    given = len(args)
    if given > positional:
        keys = traced_kwargs["keys"]
        moved = {}
        for index in range(positional, given):
            name = arg_names[index] if index < len(arg_names) else None
            # a positional-only one's name among the keywords is a ``**kwargs`` entry
            if name is None or index < positional_only or name not in keys or name in kwargs:
                return None
            moved[name] = args[index]
        return args[:positional], {**moved, **kwargs}
    if given < positional:
        names = arg_names[given:positional]
        if given < positional_only:
            return None  # a positional-only parameter is never given by keyword
        if len(names) < positional - given or any(name not in kwargs for name in names):
            return None
        rest = {key: value for key, value in kwargs.items() if key not in names}
        return (*args, *(kwargs[name] for name in names)), rest
    return None


def binding_error(
    name: str,
    args: tuple,
    kwargs: dict,
    arg_names: list[str],
    positional_only: int = 0,
    var_keywords: list[str] = (),
    in_spec: dict | None = None,
    defaults: dict | None = None,
) -> str | None:
    """Python's ``TypeError`` message for a call of ``name`` that Python would refuse
    to bind, where the trace knows enough to tell: a positional-only parameter passed
    by keyword (and not taken by ``**kwargs``), a parameter passed both by position and
    by keyword, more positional arguments than the positional parameters, and (given the
    traced ``in_spec`` and ``defaults``) a parameter left out that has no default (in
    the graph: a file written before the field knows none). None where none of these.

    >>> binding_error("f", (), {"x": 1}, ["x", "y"], positional_only=1)
    "f() got some positional-only arguments passed as keyword arguments: 'x'"
    >>> binding_error("f", (), {}, ["x", "y"], defaults={"y": None})
    "f() missing 1 required positional argument: 'x'"
    """
    as_keyword = [
        arg for arg in arg_names[:positional_only] if arg in kwargs and arg not in var_keywords
    ]
    if as_keyword:
        return (
            f"{name}() got some positional-only arguments passed as keyword arguments: "
            f"'{', '.join(as_keyword)}'"
        )
    twice = passed_twice(args, kwargs, arg_names[positional_only:], positional_only)
    if twice is not None:
        return f"{name}() got multiple values for argument {twice!r} (by position and by keyword)"
    traced_keywords = in_spec["c"][1]["keys"] if in_spec is not None else []
    if any(k not in arg_names and k not in traced_keywords for k in kwargs):
        return None  # Python names a keyword it does not know first, which the trace cannot
    var_entries = any(_maybe_var_entry(arg, i) for i, arg in enumerate(arg_names))
    if len(args) > len(arg_names) and not var_entries:
        # ``arg_names`` lists every positional parameter (and a ``*args`` parameter's
        # entries as far as the example passed them: then the count is the trace's, not
        # Python's, and the call is refused as shaped otherwise)
        return (
            f"{name}() takes {len(arg_names)} positional argument{'s' * (len(arg_names) != 1)}"
            f" but {len(args)} were given"
        )
    if defaults is None:
        return None
    positional = [
        arg
        for index, arg in enumerate(arg_names[len(args) :], len(args))
        if arg not in kwargs and arg not in defaults and not _maybe_var_entry(arg, index)
    ]
    if positional:
        return f"{name}() missing {_listed(positional, 'positional')}"
    keyword_only = [
        key
        for key in traced_keywords
        if key not in arg_names
        and key not in var_keywords
        and key not in kwargs
        and key not in defaults
    ]
    if keyword_only:
        return f"{name}() missing {_listed(keyword_only, 'keyword-only')}"
    return None


def _maybe_var_entry(arg: str, index: int) -> bool:
    """Whether ``arg`` may stand for an entry of a ``*args`` parameter (capture.py names
    them ``args1``, ``args2``, by position): such an entry is never required."""
    return arg.endswith(str(index)) and arg != str(index)


def _listed(names: list[str], kind: str) -> str:
    """Python's words for missing parameters of a ``kind``: ``1 required positional
    argument: 'x'``, ``2 required positional arguments: 'x' and 'y'``."""
    quoted = [repr(n) for n in names]
    text = (
        quoted[0]
        if len(quoted) == 1
        else ", ".join(quoted[:-1]) + ("," * (len(quoted) > 2) + " and " + quoted[-1])
    )
    return f"{len(names)} required {kind} argument{'s' * (len(names) > 1)}: {text}"


def passed_twice(args: tuple, kwargs: dict, arg_names: list[str], skip: int = 0) -> str | None:
    """The parameter a call passes both by position and by keyword (Python's "got
    multiple values for argument"), or None. ``arg_names`` starts at position ``skip``."""
    return next((name for name in arg_names[: max(len(args) - skip, 0)] if name in kwargs), None)


def traced_parameters(
    in_spec: dict, arg_names: list[str], describe, positional_only: int = 0
) -> str:
    """The traced call's parameters by name, ``(x: Tensor, mask: Tensor)``, each as the
    example passed it (``describe``: the text of a spec); a ``/`` follows the
    positional-only ones, as in Python's signature."""
    traced_args, traced_kwargs = in_spec["c"]
    named = [
        f"{name}: {describe(spec)}"
        for name, spec in list(zip(arg_names, traced_args["c"]))
        + list(zip(traced_kwargs["keys"], traced_kwargs["c"]))
    ]
    if 0 < positional_only <= len(traced_args["c"]):
        named.insert(positional_only, "/")
    return "(" + ", ".join(named) + ")"


def with_defaults(
    args: tuple,
    kwargs: dict,
    in_spec: dict,
    arg_names: list[str],
    defaults: dict,
    positional_only: int = 0,
):
    """``(args, kwargs)`` with the parameters' recorded defaults (the graph's ``defaults``)
    applied where that makes the traced call, or None where nothing changes.

    As Python binds a call: a parameter left out has its default, and one given its
    default is the call that leaves it out. So a call that gives a parameter the trace
    left out its default (``m(x, None)`` of a trace of ``m(x)``) drops it, and one that
    leaves out a parameter the trace was given a number or None for gets its default,
    where the default is that number (``m(x)`` of a trace of ``m(x, None)``). Any other
    value stays, for the caller to refuse.

    >>> spec = {"t": "tuple", "c": [{"t": "tuple", "c": [{"t": "leaf"}]},
    ...                             {"t": "dict", "keys": [], "c": []}]}
    >>> with_defaults((1, None), {}, spec, ["x", "mask"], {"mask": {"t": "none"}})
    ((1,), {})
    """
    if not defaults:
        return None
    traced_args, traced_kwargs = in_spec["c"]
    positional, keys = len(traced_args["c"]), traced_kwargs["keys"]
    taken = set(arg_names[:positional]) | set(keys)
    args, kwargs = list(args), dict(kwargs)
    changed = False
    if positional < len(args) <= len(arg_names):
        # past the traced positions, each is a parameter the trace took by keyword (moved
        # there) or one it left out, given its default (dropped); else nothing moves
        moved = {}
        for index in range(positional, len(args)):
            name, value = arg_names[index], args[index]
            if name in kwargs:
                break
            if name in keys and index >= positional_only:
                moved[name] = value
            elif name in taken or not _is_default(value, defaults.get(name)):
                break
        else:
            args, changed = args[:positional], True
            kwargs.update(moved)
    for name in [k for k in kwargs if k not in taken and k in defaults]:
        index = arg_names.index(name) if name in arg_names else -1
        if index < positional_only and index >= 0:
            continue  # a positional-only name among the keywords is no parameter's
        if _is_default(kwargs[name], defaults[name]):
            del kwargs[name]
            changed = True
    while len(args) < positional:
        name = arg_names[len(args)] if len(args) < len(arg_names) else None
        spec = traced_args["c"][len(args)]
        if name is not None and name in kwargs and len(args) >= positional_only:
            args.append(kwargs.pop(name))  # given by keyword: to its place, as bound
        elif name is not None and _default_is(defaults.get(name), spec):
            args.append(_value_of(spec))
        else:
            break
        changed = True
    for key, spec in zip(keys, traced_kwargs["c"]):
        index = arg_names.index(key) if key in arg_names else len(args)
        if key in kwargs or index < len(args) or not _default_is(defaults.get(key, False), spec):
            continue
        kwargs[key] = _value_of(spec)
        changed = True
    return (tuple(args), kwargs) if changed else None


def _is_default(value, default) -> bool:
    """Whether ``value`` is the recorded ``default`` (a ``none``/``const`` spec), by type:
    ``1`` is not the default ``1.0``."""
    if not isinstance(default, dict):
        return False
    if default["t"] == "none":
        return value is None
    recorded = default["v"]
    if type(value) is not type(recorded):
        return False
    return value == recorded or (value != value and recorded != recorded)


def _default_is(default, spec: dict) -> bool:
    """Whether a recorded default is the constant the trace was given (``spec``)."""
    return (
        isinstance(default, dict)
        and spec["t"] in ("none", "const")
        and (_is_default(_value_of(spec), default))
    )


def _value_of(spec: dict):
    return None if spec["t"] == "none" else spec["v"]
