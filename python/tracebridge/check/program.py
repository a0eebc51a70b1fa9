"""The one checker of programs: every rule of ``shared_ir/SPEC.md``, in one place.

:func:`check_program` runs on every load (before any runtime sees the program), in
``tracebridge validate``, and after tracing in the tests. ``R/check.R`` applies the document
rules (:func:`check_document_rules`) in R for ``jit_inspect``, driven by the same tables
(``program.schema.json``, ``shared_ir/ops.json``, ``shared_ir/dtypes.json``); the execution
rules live here only (R's ``jit_load`` loads through Python).
"""

from __future__ import annotations

import functools
import json
import keyword
import math
import re
from importlib import resources
from typing import Any

import torch

from ..errors import ArtifactError
from ..ir import FORMAT_VERSION, Program, dtypes, graph_to_json, ops
from ..ir.program import AUTOGRAD_FUNCTION, GRAPH_KEYWORDS
from . import views
from .budget import Budget
from .state_writes import StateWrites, subgraph_write

# --- limits ---------------------------------------------------------------------------------
# Note: the limits are far above what a traced model needs (the largest model of the test
# zoo has a few thousand nodes and a program.json of a few megabytes) and low enough that
# checking and loading a hostile file takes seconds and hundreds of megabytes, not hours.
LIMITS = {
    "program_bytes": 64 * 2**20,  # program.json, before it is parsed
    # '{' and '[' bytes of program.json, counted before it is parsed (an upper bound on its
    # objects and arrays): parsing and checking cost grows with them, not with bytes.
    "containers": 400_000,
    "depth": 64,  # nesting of JSON arrays and objects
    "nodes": 200_000,  # all nodes of all methods
    "methods": 10_000,
    "name_chars": 512,  # method, state, input and keyword names
    "text_chars": 4096,  # loc and guard descriptions
    "literal_numel": 2**28,  # elements a size written in the file may ask for
    "graph_literal_numel": 2**31,  # the same, added over all nodes of one graph
    # Bytes of one tensor whose shape the file decides (sizes written in it, its state, and
    # what ops make of them; also the bound at the call for sizes taken from values), and
    # of all such tensors of one graph; multiply-adds of matrix products of such tensors
    # in one graph (2**36: about ten seconds on one core). See check/budget.py.
    "alloc_bytes": 2**30,
    "graph_alloc_bytes": 2**34,
    "work_macs": 2**36,
    # Results of one op whose count is an argument (tensor_split(x, n) makes n tensors).
    "results": 2**16,
    # The product of the scale factors an upsampling op is given in the file, and the
    # length of combinations(x, r): each multiplies the size of its input.
    "scale_product": 2**10,
    "combinations_r": 16,
    # Generators a file keeps (SPEC section 9, Generators), and the bytes of their states
    # in tensors.safetensors, all together (a CPU generator's is 5056, a CUDA one's 16).
    "generators": 1024,
    "generator_bytes": 2**24,
    "int_min": -(2**63),
    "int_max": 2**64 - 1,
}

# --- names ----------------------------------------------------------------------------------
# Method names: an ASCII identifier that starts with a letter, so that no method can reach
# a private attribute of the loaded module; keyword names: an ASCII identifier; state,
# input and value names: dotted paths of ASCII word characters and ``-``
# (``layer1.0.conv1.weight``, torchvision's ``trunk_output.block1-0.proj.weight``).
METHOD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
KEYWORD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PATH_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
CLASS_NAME = re.compile(r"[A-Za-z0-9_.]+")
LOC = re.compile(r"[^\x00-\x1f\x7f]+:[0-9]+")
# A module's settings as printed (module_reprs): any text without control characters.
# A module_types entry: a class of torch.nn, by its module and qualified name
TORCH_CLASS = re.compile(r"torch\.nn\.[A-Za-z0-9_.]+")
REPR_TEXT = re.compile(r"[^\x00-\x1f\x7f]*")
SYMBOL = re.compile(r"s[0-9]+")
DIM_EXPR = re.compile(r"([0-9]+\*)?s[0-9]+([+-][0-9]+)?|\?")
# Not ``meta``: a meta tensor holds no data, and kernels given one beside tensors that do
# (mm, matmul, linear, linalg.solve_triangular, lu_solve, fused_moving_avg_obs_fake_quant,
# ...) return a CPU tensor of memory they never wrote. A program can only make one from a
# device named in the file (a literal, or a string in a device argument), so neither may
# name it; a program traced on the meta device records ``x.device`` (``prim.device``).
DEVICE = re.compile(r"(cpu|cuda|mps|xpu)(:[0-9]{1,3})?")
_META_DEVICE = re.compile(r"meta(:[0-9]+)?")
_GENERATOR_DEVICE = re.compile(r"(cpu|cuda)(:[0-9]{1,3})?")
R_RESERVED = "if else repeat while function for next break TRUE FALSE NULL Inf NaN NA in"
# A method is reached as an attribute of the loaded module: it must not replace one.
_LOADED_ADDS = "program methods code graph guards save check_guards".split()
RESERVED_METHODS = frozenset(
    [n for n in dir(torch.nn.Module) if not n.startswith("_") and n != "forward"]
    + _LOADED_ADDS
    + keyword.kwlist
    + R_RESERVED.split()
)
# A state name becomes a path of attributes of the loaded module: no part may be an
# attribute every nn.Module already has (``training``, ``_modules``, ``cpu``: PyTorch's
# own ``add_module`` refuses those too) or one the loaded module adds. Python keywords and
# R's reserved words are not attributes: they are refused as method names only (a method
# is called by its name), not as parts of a state name (timm's Inception-ResNet keeps its
# blocks in ``self.repeat``; a part is reached as a string, ``getattr``/``[[``).
RESERVED_ATTRIBUTES = frozenset(
    set(dir(torch.nn.Module())) | set(_LOADED_ADDS) | {"_tb_constants", "_methods"}
)
VALUE_KINDS = ("Tensor", "int", "float", "bool", "dtype", "device", "list")
_REF_KIND = {
    "Tensor": "tensor",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "dtype": "dtype",
    "device": "device",
    "list": "list",
}
LITERAL_TAGS = (
    "ref",
    "float",
    "tuple",
    "dict",
    "slice",
    "ellipsis",
    "dtype",
    "device",
    "memory_format",
    "layout",
    "complex",
    "generator",
)
MEMORY_FORMATS = ("contiguous_format", "channels_last", "preserve_format", "channels_last_3d")


# What to do about a file that breaks a rule, unless the rule says more.
FILE_FIX = "the file is corrupt or was edited by hand; save it again from the traced code"
# The same on save: the program in hand breaks a rule, so no reader would load the file.
SAVE_FIX = (
    "not saved: no reader would load it; for a rule on names, rename the module, parameter "
    "or method it names (names are dotted paths of letters, digits, '_' and '-') and trace "
    "again; for a limit (shared_ir/SPEC.md, section 3), change the traced code so that it "
    "asks for less, or report the model if the limit is wrong for it"
)


class _Fault(Exception):
    """A rule broken somewhere inside a node; the caller adds where."""

    def __init__(self, rule: str, message: str, fix: str = ""):
        super().__init__(message)
        self.rule, self.message, self.fix = rule, message, fix


def _fail(rule: str, message: str, fix: str = ""):
    raise _Fault(rule, message, fix)


# --- the checker ----------------------------------------------------------------------------


def check_program(program_or_doc: Program | dict, name: str = "", *, strict: bool = False):
    """Check a program (an in-memory :class:`Program` or a parsed ``program.json``) against
    every rule of the spec; raise :class:`ArtifactError` naming the method, the node, the
    rule and what to do, at the first fault.

    Rules (SPEC.md section in brackets):

    * **document** [2, 11]: an object with ``format: "tracebridge"``; ``format_version``
      and ``opset_version`` integers from 1 to the newest this version reads; the JSON
      Schema holds; a ``function`` has a method ``forward`` and only constant state;
      every dispatch route names a method, and no dispatch key is also a method;
      ``tensors.count`` equals the number of state entries stored in the file (those not
      listed in ``tensors.external``, whose data a load takes from ``weights=``); with
      ``strict`` (``tracebridge validate``) ``tensors.sha256`` must be present.
    * **names**: method and dispatch names match ``[A-Za-z][A-Za-z0-9_]*`` and are not an
      attribute of a loaded module (``eval``, ``train``, ``to``, ``parameters``, ...), a
      Python keyword or an R reserved word; state names and value names are dotted paths
      of ``[A-Za-z0-9_]``; keyword-argument names and ``arg_names`` are identifiers; a
      ``loc`` is ``path:line`` without control characters.
    * **values** [4]: kinds from the spec; a Tensor has a dtype of the table and a shape;
      graph inputs have symbol dimensions ``s0``, ``s1``, ...; other dimensions are
      integers, ``?`` or ``K*sN+C``.
    * **SSA and order** [3.1, 3.2]: every id is defined once (an input or one node
      output); every ``ref`` names a value defined before it (inputs, earlier nodes);
      every graph output names a defined value.
    * **specs** [3]: ``in_spec`` is ``tuple(tuple, dict)``; the number of inputs, node
      outputs and graph outputs equals the leaves of their specs; ``var_keywords`` are
      distinct keys of the keyword dict, in its order; ``positional_only`` counts at
      most the ``arg_names``, and the keyword dict names none of those outside
      ``var_keywords``; ``defaults`` name parameters of the graph, each null or a
      ``none``/``const`` spec of a value a file holds.
    * **ops** [6, 7, 8]: every op is in the op set; arguments and keywords have the kinds
      the op takes (``shared_ir/ops.json``); ``prim.state`` names a state entry;
      ``prim.guard`` has one argument, ``expect``, and a guard ``kind`` of the spec;
      ``prim.autocast_enabled``/``prim.autocast_dtype`` name a device type torch keeps
      autocast state for.
    * **graphs named by nodes** [7.1]: a ``prim.autograd_function`` node takes a list of
      tensor values, names a ``forward`` and a ``backward`` graph of the file and a count
      of ``saved`` values, and has tensor outputs (``non_differentiable``, if given, lists
      distinct positions of them); the arities agree (forward: one input
      per tensor, the node's outputs then the saved values out; backward: the saved values
      then one gradient per output in, one gradient per tensor out, each a flat tuple); the
      named graphs read no state; no graph reaches itself through such nodes.
    * **literals** [5]: one-key objects with a known tag and a well-formed body; sizes,
      strides, offsets, repeats and dims written in the file that PyTorch would refuse (a
      negative one, a bool for an integer, a dim past its input's rank: ``check/views.py``).
    * **fields that runs depend on** [2]: ``mode_bound`` (in ``meta`` for format 1) names
      methods and has a boolean ``training``; a graph's ``sources`` map locations to lines;
      ``specialised`` maps methods to lists of distinct methods; ``tensors.external``
      names state; ``meta`` is display-only and never read.
    * **resources**: nesting depth, node and method counts, name and text lengths,
      integers inside int64/uint64, and a size written as a literal may not ask for more
      than ``LIMITS["literal_numel"]`` elements; scalar ops on literals must stay in range
      (``LIMITS``; the size of ``program.json`` is checked by the reader before parsing).
    * **bytes and work** [3.8]: tensors whose shape the file alone decides are followed
      through the graph (``check/budget.py``): one is at most ``alloc_bytes``, all of a
      graph ``graph_alloc_bytes``, their matrix products ``work_macs`` multiply-adds; a
      count of results, ``combinations``' ``r`` and scale factors are bounded.
    * **enums** [3.9]: an integer enum argument (``enums`` of ``ops.json``) is written in
      the file as one of its values.
    * **state writes** [3.10]: no in-place op, running-statistics argument or custom
      function graph writes a parameter or a constant, through any view of it, and no
      ``requires_grad_``/``detach_`` touches state (``check/state_writes.py``).

    >>> import torch, tracebridge
    >>> traced = tracebridge.trace(lambda x: x.relu(), torch.ones(2))
    >>> check_program(traced.program)
    """
    prefix = f"{name}: " if name else ""
    if isinstance(program_or_doc, Program):
        doc = _doc_of(program_or_doc)
        from_file = False
    else:
        doc = program_or_doc
        from_file = True
    try:
        _document_rules(doc, from_file, strict)
        checks = _check_methods(doc)
        _check_subgraphs(doc, checks)
    except _Located as fault:
        raise ArtifactError(prefix + str(fault)) from None
    except _Fault as fault:
        raise ArtifactError(_message(prefix, None, None, None, fault)) from None


def check_document_rules(doc: Any, name: str = "", *, strict: bool = False) -> None:
    """Only the document rules of :func:`check_program` (depth, header, schema, document
    fields, names of methods, state, dispatch, classes, aliases, ``mode_bound``,
    ``specialised``): the part R's reader (``R/check.R``, run by ``jit_inspect``) applies
    too. The execution rules (graphs, ops, arguments, literals, sizes, limits) live only
    in :func:`check_program`; ``jit_load`` reaches them through Python."""
    prefix = f"{name}: " if name else ""
    try:
        _document_rules(doc, True, strict)
    except _Fault as fault:
        raise ArtifactError(_message(prefix, None, None, None, fault)) from None


def _document_rules(doc: Any, from_file: bool, strict: bool) -> None:
    _check_depth(doc)
    if from_file:
        _check_header(doc)
        _check_schema(doc)
        _check_document(doc, strict)
    _check_names_and_dispatch(doc)
    _check_mode_bound(doc)
    _check_specialised(doc)
    _check_aliases(doc)
    _check_generators(doc)


class _Located(Exception):
    pass


def _message(prefix, method, index, op, fault: _Fault) -> str:
    where = []
    if method is not None:
        where.append(f"method {method!r}")
    if index is not None:
        where.append(f"node {index}" + (f" ({op})" if op else ""))
    head = prefix + (", ".join(where) + ": " if where else "")
    text = f"{head}{fault.message} [rule: {fault.rule}]"
    return f"{text}; {fault.fix or FILE_FIX}"


def _doc_of(program: Program) -> dict:
    # State tensors are not touched: a program is also checked while a tracer may still be
    # recording, and reading a tensor's shape there would record it. The rules of an
    # in-memory program need only the state's names and kinds.
    methods = {m: graph_to_json(g) for m, g in program.methods.items()}
    for graph in methods.values():
        for value in graph["inputs"] + [v for n in graph["nodes"] for v in n["outputs"]]:
            if "shape" in value:
                # A traced number (a size a tracer still follows) compares by recording a
                # guard: it is an intermediate size, informative only, so "?" stands in.
                value["shape"] = [d if type(d) in (int, str) else "?" for d in value["shape"]]
    return {
        "kind": program.kind,
        "methods": methods,
        "dispatch": program.dispatch,
        "module_classes": program.module_classes,
        "module_reprs": program.module_reprs,
        "module_types": program.module_types,
        "module_modes": program.module_modes,
        "state": {n: {"kind": e.kind} for n, e in program.state.items()},
        "mode_bound": program.mode_bound,
        "specialised": program.specialised,
        "aliases": program.aliases,
        "generators": {n: {"device": str(g.device)} for n, g in program.generators.items()},
    }


def _refuse_raw(count: int, limit: str, what: str, name: str) -> None:
    """Refuse a ``program.json`` before it is parsed when ``count`` passes ``LIMITS[limit]``."""
    if count > LIMITS[limit]:
        prefix = f"{name}: " if name else ""
        raise ArtifactError(
            f"{prefix}program.json {what} {count}, more than the limit of {LIMITS[limit]} "
            "[rule: resource limits]; the file is not a program tracebridge wrote"
        )


def check_json_size(size: int, name: str = "") -> None:
    """Refuse a ``program.json`` larger than ``LIMITS["program_bytes"]``, before reading it."""
    _refuse_raw(size, "program_bytes", "has a size in bytes of", name)


def check_json_containers(raw: bytes, name: str = "") -> None:
    """Refuse a ``program.json`` with more ``{``/``[`` than ``LIMITS["containers"]``, before
    parsing it: a file of a few megabytes of empty objects would otherwise cost gigabytes
    and minutes to parse and walk."""
    what = "has a count of JSON objects and arrays of"
    _refuse_raw(json_containers(raw), "containers", what, name)


def json_containers(raw: bytes) -> int:
    """``{`` and ``[`` bytes of a JSON text: an upper bound on its objects and arrays, which
    a reader counts before parsing (``LIMITS["containers"]``) and a writer before writing."""
    return raw.count(b"{") + raw.count(b"[")


def _check_depth(doc: Any) -> None:
    """No value of the document is deeper than ``LIMITS["depth"]`` (the document itself is
    level 1). Walked level by level, holding only the containers of the next level: most
    values are numbers and strings, and this walk runs on every load."""
    limit = LIMITS["depth"]
    level, depth = ([doc] if type(doc) is dict or type(doc) is list else []), 1
    while level:
        below, any_value = [], False
        for obj in level:
            values = obj.values() if type(obj) is dict else obj
            if values:
                any_value = True
                below += [v for v in values if type(v) is dict or type(v) is list]
        if any_value and depth + 1 > limit:
            _fail("resource limits", f"JSON nested more than {limit} levels deep")
        level, depth = below, depth + 1


def _check_header(doc: Any) -> None:
    if not isinstance(doc, dict) or doc.get("format") != "tracebridge":
        _fail(
            "document",
            "not a tracebridge artifact (format field missing)",
            "open a file written by tracebridge.save or jit_save",
        )
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        _fail("document", f"invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        _fail(
            "versions",
            f"format version {version} is newer than this tracebridge reads "
            f"(up to {FORMAT_VERSION})",
            "upgrade tracebridge to load it",
        )
    opset = doc.get("opset_version")
    if not _is_int(opset) or opset < 1:
        _fail("document", f"invalid opset_version {str(opset)[:20]}")
    if opset > ops.OPSET_VERSION:
        _fail(
            "versions",
            f"op-set version {opset} is newer than this tracebridge knows ({ops.OPSET_VERSION})",
            "upgrade tracebridge to load it",
        )


@functools.cache
def _validator():
    """The JSON Schema (draft-07) compiled to a Python function once."""
    import fastjsonschema

    text = resources.files("tracebridge").joinpath("schema/program.schema.json").read_text()
    return fastjsonschema.compile(json.loads(text))


def _check_schema(doc: dict) -> None:
    import fastjsonschema

    try:
        _validator()(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        where = "/".join(str(p) for p in exc.path[1:]) or "(top level)"
        _fail("schema", f"program.json does not follow the schema at {where}: {exc.message}")


def _is_int(x: Any) -> bool:
    """A JSON integer written without a fraction (the schema's ``integer`` also takes 2.0)."""
    return isinstance(x, int) and not isinstance(x, bool)


def _check_document(doc: dict, strict: bool) -> None:
    for state, entry in doc["state"].items():
        if not all(_is_int(d) for d in entry["shape"]):
            _fail("document", f"state {state[:40]!r} has a shape that is not a list of integers")
    tensors = doc.get("tensors") or {}
    if "count" in tensors and not _is_int(tensors["count"]):
        _fail("document", "tensors.count must be an integer")
    if strict and "sha256" not in tensors:
        _fail(
            "document",
            "program.json has no tensors.sha256 checksum",
            "save the program again with tracebridge",
        )
    count = tensors.get("count")
    external = tensors.get("external", [])
    if not isinstance(external, list) or not all(
        isinstance(n, str) and n in doc["state"] for n in external
    ):
        _fail("document", "tensors.external must be a list of names of state entries")
    if len(set(external)) != len(external):
        _fail("document", "tensors.external names a state entry twice")
    stored = len(doc["state"]) - len(external)  # external weights are bound at load
    if count is not None and count != stored:
        _fail(
            "document",
            f"tensors.count is {count} but the state has {stored} tensors stored in the file",
        )
    if len(doc["methods"]) > LIMITS["methods"]:
        _fail("resource limits", f"{len(doc['methods'])} methods, more than {LIMITS['methods']}")


def _check_mode_bound(doc: dict) -> None:
    """``mode_bound`` (in ``meta`` for format 1) names methods, with a boolean mode."""
    bound = doc.get("mode_bound")
    backend = doc.get("backend")
    if doc.get("format_version") == 1:
        meta = doc.get("meta") or {}
        bound, backend = meta.get("mode_bound"), meta.get("backend")
        if backend is not None and not (
            isinstance(backend, dict) and isinstance(backend.get("name"), str)
        ):
            _fail("document", "meta.backend of a format-1 file must be an object with a name")
    if bound is None:
        return
    if not isinstance(bound, dict):
        _fail("document", "mode_bound must be an object of methods")
    for method, entry in bound.items():
        if method not in doc["methods"]:
            _fail(
                "dispatch", f"mode_bound names method {method[:40]!r}, which the file does not have"
            )
        if not isinstance(entry, dict) or not isinstance(entry.get("training"), bool):
            _fail("document", f"mode_bound of {method!r} needs a boolean 'training'")
        loc = entry.get("loc")
        if loc is not None and not _fits(LOC, loc, LIMITS["text_chars"]):
            _fail("names", "a mode_bound loc must be 'path:line' without control characters")
        if not isinstance(entry.get("op", ""), str):
            _fail("document", f"mode_bound of {method!r} has an op that is not a string")


def _check_aliases(doc: dict) -> None:
    """``aliases`` (other name -> state name): names of the state grammar, each naming a
    state entry, none itself a state name."""
    aliases = doc.get("aliases")
    if aliases is None:
        return
    if not isinstance(aliases, dict):
        _fail("document", "aliases must map names to state names")
    for alias, target in aliases.items():
        _path_name(alias, "alias")
        if not isinstance(target, str) or target not in doc["state"] or alias in doc["state"]:
            _fail(
                "document",
                f"alias {alias[:40]!r} must name a state entry and not be one "
                f"(it names {str(target)[:40]!r})",
            )


def _check_specialised(doc: dict) -> None:
    """``specialised`` (method -> its size-1 variants): methods of the file, each variant
    used once and never itself specialised."""
    spec = doc.get("specialised")
    if spec is None:
        return
    if not isinstance(spec, dict):
        _fail("document", "specialised must map methods to lists of methods")
    seen: set = set()
    for method, variants in spec.items():
        if method not in doc["methods"] or not isinstance(variants, list):
            _fail(
                "document",
                f"specialised names {method[:40]!r}, which is not a method with a list of variants",
            )
        for variant in variants:
            if (
                not isinstance(variant, str)
                or variant not in doc["methods"]
                or variant in seen
                or variant in spec
            ):
                _fail(
                    "document",
                    f"specialised of {method!r} names "
                    f"{str(variant)[:40]!r}, which is not a method of the file (or twice)",
                )
            seen.add(variant)


def _check_generators(doc: dict) -> None:
    """The generators random ops draw from (SPEC section 9): each named as a state entry
    is (a dotted path: where a loaded module holds it), none a state entry, a module of a
    state entry or a method, each on a device a generator can be made on."""
    generators = doc.get("generators") or {}
    if not isinstance(generators, dict):
        _fail("document", "generators must be an object")
    if len(generators) > LIMITS["generators"]:
        _fail(
            "resource limits",
            f"{len(generators)} generators, more than {LIMITS['generators']}",
        )
    names = set(doc["state"])
    modules = {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 1)}
    holders = names | set(generators)
    for name, entry in generators.items():
        _path_name(name, "generator")
        clash = next(
            (
                p
                for p in name.split(".")
                # (a loaded module's own attributes: _class_name, _tb_constants, ...)
                if p in RESERVED_ATTRIBUTES or p.startswith("_tb") or p == "_class_name"
            ),
            None,
        )
        if clash is not None:
            _fail(
                "names",
                f"generator {name[:40]!r} has the part {clash[:40]!r}, which every loaded "
                "module already has as an attribute",
            )
        parts = name.split(".")
        inside = next(
            (".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in holders),
            None,
        )
        if inside is not None:
            _fail("names", f"{inside[:40]!r} is not a module, so {name[:40]!r} cannot be inside it")
        if name in names or name in modules or name in doc["methods"]:
            _fail(
                "names",
                f"generator {name[:40]!r} has the name of a state tensor, a module or a "
                "method of the program",
            )
        device = entry.get("device") if isinstance(entry, dict) else None
        if not isinstance(device, str) or not _GENERATOR_DEVICE.fullmatch(device):
            _fail("document", f"generator {name[:40]!r} has no device 'cpu' or 'cuda[:N]'")


def _check_names_and_dispatch(doc: dict) -> None:
    methods = doc["methods"]
    for method in methods:
        _method_name(method, "method")
    top = {n.split(".", 1)[0] for n in doc["state"]}
    for method in methods:
        if method in top:
            _fail(
                "names",
                f"method {method!r} has the name of a sub-module or parameter of "
                "the program, which it would hide",
            )
    if doc["kind"] == "function":
        if "forward" not in methods:
            _fail("document", "a function program must have a method 'forward'")
        kinds = {e["kind"] for e in doc["state"].values()} - {"constant"}
        if kinds:
            _fail(
                "document",
                "a function program holds only constants, not " + ", ".join(sorted(kinds)),
            )
    for key, route in (doc.get("dispatch") or {}).items():
        _method_name(key, "dispatch entry")
        if key in methods:
            _fail("dispatch", f"{key!r} is both a method and a dispatch entry")
        for mode in ("train", "eval"):
            if route[mode] not in methods:
                _fail(
                    "dispatch",
                    f"dispatch of {key!r} in {mode} mode names method "
                    f"{route[mode]!r}, which the file does not have",
                )
    for state in doc["state"]:
        _path_name(state, "state")
        clash = next((p for p in state.split(".") if p in RESERVED_ATTRIBUTES), None)
        if clash is not None:
            _fail(
                "names",
                f"state name {state[:40]!r} has the part {clash[:40]!r}, which every loaded "
                "module already has as an attribute",
            )
    names = set(doc["state"])
    for state in doc["state"]:
        parts = state.split(".")
        parent = next(
            (".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in names),
            None,
        )
        if parent is not None:
            _fail(
                "names",
                f"state {parent[:40]!r} is a tensor, so {state[:40]!r} cannot be inside it",
            )
    for path, cls in (doc.get("module_classes") or {}).items():
        if path:
            _path_name(path, "module path")
        if not _fits(CLASS_NAME, cls, LIMITS["name_chars"]):
            _fail("names", f"module class {cls[:40]!r} is not a class name")
    for path, text in (doc.get("module_reprs") or {}).items():
        if path:
            _path_name(path, "module path")
        if not _fits(REPR_TEXT, text, LIMITS["text_chars"]):
            _fail(
                "names",
                f"the settings of module {path[:40]!r} are not one line of text of at most "
                f"{LIMITS['text_chars']} characters",
            )
    for path, name in (doc.get("module_types") or {}).items():
        if path:
            _path_name(path, "module path")
        if not _fits(TORCH_CLASS, name, LIMITS["name_chars"]):
            _fail("names", f"module type {str(name)[:40]!r} is not a class of torch.nn")
    modes = doc.get("module_modes") or {}
    if not isinstance(modes, dict):
        _fail("document", "module_modes must be an object of graphs")
    for graph, flags in modes.items():
        if graph not in doc["methods"]:
            _fail(
                "names",
                f"module_modes names graph {str(graph)[:40]!r}, which the file does not have",
            )
        if not isinstance(flags, dict):
            _fail("document", f"module_modes of {graph[:40]!r} must be an object of module paths")
        for path, flag in flags.items():
            if path:  # "" is the module itself
                _path_name(path, "module path")
            if type(flag) is not bool:
                _fail(
                    "document", f"module_modes of {graph[:40]!r}, {path[:40]!r}: not true or false"
                )


def _fits(pattern: re.Pattern, text: Any, limit: int) -> bool:
    return isinstance(text, str) and len(text) <= limit and pattern.fullmatch(text) is not None


def _method_name(name: str, what: str) -> None:
    if not _fits(METHOD_NAME, name, LIMITS["name_chars"]):
        _fail("names", f"{what} name {name[:40]!r} is not a name of the form [A-Za-z][A-Za-z0-9_]*")
    if name in RESERVED_METHODS:
        _fail(
            "names",
            f"{what} name {name!r} would replace the loaded module's own attribute {name!r}",
            "trace the method under another name",
        )


def _path_name(name: str, what: str) -> None:
    if not _fits(PATH_NAME, name, LIMITS["name_chars"]):
        _fail("names", f"{what} name {name[:40]!r} is not a dotted path of [A-Za-z0-9_-] parts")


def _check_methods(doc: dict) -> dict[str, _GraphCheck]:
    total = 0
    checks = {}
    for method, graph in doc["methods"].items():
        total += len(graph["nodes"])
        if total > LIMITS["nodes"]:
            raise _Located(
                _message(
                    "",
                    method,
                    None,
                    None,
                    _Fault("resource limits", f"more than {LIMITS['nodes']} nodes"),
                )
            )
        checks[method] = _GraphCheck(doc, method, graph)
        checks[method].run()
    return checks


def _flat_tuple(spec: Any, count: int) -> bool:
    return (
        isinstance(spec, dict)
        and spec.get("t") == "tuple"
        and isinstance(spec.get("c"), list)
        and len(spec["c"]) == count
        and all(c == {"t": "leaf"} for c in spec["c"])
    )


def _check_subgraphs(doc: dict, checks: dict[str, _GraphCheck]) -> None:
    """The graphs that ``prim.autograd_function`` nodes name: present, arities that agree,
    no state, no write to a parameter or constant the node passes, and no graph that
    reaches itself (each graph was checked on its own)."""
    methods = doc["methods"]
    edges: dict[str, list[str]] = {m: [] for m in methods}
    kinds = _state_kinds(doc)
    for method, graph in methods.items():
        for index, node in enumerate(graph["nodes"]):
            if node["op"] != AUTOGRAD_FUNCTION:
                continue
            try:
                edges[method] += _autograd_arities(methods, node)
                forward = checks[node["kwargs"]["forward"]].writes
                backward = checks[node["kwargs"]["backward"]].writes
                passed = checks[method].writes.passed.get(index, [])
                # the backward graph's first inputs are the forward graph's saved outputs
                saved = forward.outputs[len(node["outputs"]) :][: node["kwargs"]["saved"]]
                kept = [
                    frozenset(r for s in saved_roots for r in forward.through(s, passed))
                    for saved_roots in saved
                ]
                reason = subgraph_write(passed, forward.written_inputs, kinds, "forward")
                reason = reason or subgraph_write(kept, backward.written_inputs, kinds, "backward")
                if reason:
                    _fail("state writes", reason, _WRITE_FIX)
            except _Fault as fault:
                raise _Located(_message("", method, index, node["op"], fault)) from None
    # A graph that reaches itself would call itself without end: refuse any cycle. Graphs
    # nest at most LIMITS["depth"] levels (each level is a frame of the runtime's stack).
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    height: dict[str, int] = {}  # levels of graphs below and including a done graph
    for root in methods:
        if root in state:
            continue
        stack = [(root, iter(edges[root]))]
        state[root] = 1
        while stack:
            method, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[method] = 2
                height[method] = 1 + max((height[c] for c in edges[method]), default=0)
                if height[method] > LIMITS["depth"]:
                    fault = _Fault(
                        "resource limits",
                        f"graphs nest more than {LIMITS['depth']} levels through "
                        "prim.autograd_function nodes",
                    )
                    raise _Located(_message("", method, None, None, fault))
                stack.pop()
            elif state.get(child) == 1:
                fault = _Fault(
                    "graphs",
                    f"graph {child!r} reaches itself through prim.autograd_function nodes "
                    f"(from {method!r})",
                )
                raise _Located(_message("", method, None, None, fault))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(edges[child])))


def _autograd_arities(methods: dict, node: dict) -> list[str]:
    kwargs = node["kwargs"]
    names = [kwargs[k] for k in GRAPH_KEYWORDS]
    for key, name in zip(GRAPH_KEYWORDS, names):
        if name not in methods:
            _fail("graphs", f"the {key} graph {name[:60]!r} is not a graph of the file")
        if any(n["op"] == "prim.state" for n in methods[name]["nodes"]):
            _fail("graphs", f"the {key} graph {name[:60]!r} reads state, which it is not given")
    forward, backward = (methods[n] for n in names)
    n_in = len(_elements(node["args"][0]))
    n_out, saved = len(node["outputs"]), kwargs["saved"]
    expected = [
        ("forward", "inputs", len(forward["inputs"]), n_in),
        ("forward", "outputs", len(forward["outputs"]), n_out + saved),
        ("backward", "inputs", len(backward["inputs"]), saved + n_out),
        ("backward", "outputs", len(backward["outputs"]), n_in),
    ]
    for key, what, have, want in expected:
        if have != want:
            _fail(
                "graphs",
                f"the {key} graph {kwargs[key][:60]!r} has {have} {what}, not {want} "
                f"(the node has {n_in} tensors, {n_out} outputs and {saved} saved values)",
            )
    for key, graph, count in (("forward", forward, n_out + saved), ("backward", backward, n_in)):
        if not _flat_tuple(graph["out_spec"], count):
            _fail("graphs", f"the {key} graph {kwargs[key][:60]!r} must return a flat tuple")
    return names


# --- one graph ------------------------------------------------------------------------------

_WRITE_FIX = (
    "the file would change the model it holds on every call; do not load it (to change "
    "weights on purpose, do it in Python or R after loading)"
)


def _state_kinds(doc: dict) -> dict[str, str]:
    return {
        name: entry.get("kind", "") if isinstance(entry, dict) else ""
        for name, entry in doc["state"].items()
    }


class _GraphCheck:
    """The graph rules, node by node, with the value table built as it goes."""

    def __init__(self, doc: dict, method: str, graph: dict):
        self.doc, self.method, self.graph = doc, method, graph
        self.kinds: dict[int, str] = {}  # value id -> kind, for values defined so far
        self.ranks: dict[int, int] = {}  # tensor value id -> the rank the file declares
        self.opset = doc.get("opset_version", ops.OPSET_VERSION)
        self.literal_total = 0  # elements asked for by sizes written in the file, so far
        # value id -> the integer a scalar op computes from literals alone: a size written as
        # scalar.mul(2**20, 2**20) is as much a literal as 2**40.
        self.constants: dict[int, int] = {}
        self.literal_items: dict[int, int] = {}  # value id -> the int a tensor literal holds

    def run(self) -> None:
        try:
            self._inputs()
        except _Fault as fault:
            raise _Located(_message("", self.method, None, None, fault)) from None
        inputs = [v["id"] for v in self.graph["inputs"]]
        self.writes = StateWrites(_state_kinds(self.doc), inputs)
        self.budget = Budget(self.doc["state"], LIMITS, _ELEMENTWISE)
        for index, node in enumerate(self.graph["nodes"]):
            self.index = index
            try:
                self._node(node)
            except _Fault as fault:
                raise _Located(_message("", self.method, index, node.get("op"), fault)) from None
        try:
            for literal in self.graph["outputs"]:
                self._literal(literal, 0)
                if _names_generator(literal):
                    _fail("literals", "a graph output is a generator: only random ops take one")
            _leaf_count(self.graph["out_spec"], len(self.graph["outputs"]), "outputs", "out_spec")
        except _Fault as fault:
            raise _Located(_message("", self.method, None, None, fault)) from None
        self.writes.outputs = [self.writes.roots_of(lit) for lit in self.graph["outputs"]]

    def _inputs(self) -> None:
        graph = self.graph
        for arg in graph.get("arg_names", []):
            if not _fits(KEYWORD_NAME, arg, LIMITS["name_chars"]) and arg != "...":
                _fail("names", f"argument name {arg[:40]!r} is not an identifier")
        spec = graph["in_spec"]
        if not (
            spec.get("t") == "tuple"
            and len(spec.get("c", [])) == 2
            and spec["c"][0].get("t") == "tuple"
            and spec["c"][1].get("t") == "dict"
        ):
            _fail("specs", "in_spec must be a tuple of (args tuple, kwargs dict)")
        _leaf_count(spec, len(graph["inputs"]), "inputs", "in_spec")
        _var_keywords(graph.get("var_keywords", []), spec["c"][1].get("keys", []))
        _positional_only(graph, spec["c"][1].get("keys", []))
        _defaults(graph, spec["c"][1].get("keys", []))
        _distinct_inputs(graph.get("distinct_inputs", []), len(graph["inputs"]))
        for value in graph["inputs"]:
            self._define(value, is_input=True)

    def _define(self, value: dict, is_input: bool = False) -> None:
        vid = value["id"]
        if not _is_int(vid):
            _fail("values", f"value id {str(vid)[:20]} is not an integer")
        if vid in self.kinds:
            _fail("SSA", f"value %{vid} is defined twice", "")
        kind = value["kind"]
        name = value.get("name")
        if name is not None and not _fits(PATH_NAME, name, LIMITS["name_chars"]):
            _fail("names", f"value name {name[:40]!r} is not a dotted path of [A-Za-z0-9_-] parts")
        if kind == "Tensor":
            if value.get("dtype") not in dtypes.BY_NAME or not isinstance(value.get("shape"), list):
                _fail("values", f"tensor value %{vid} needs a dtype of the table and a shape")
            for dim in value["shape"]:
                if is_input:
                    ok = isinstance(dim, str) and SYMBOL.fullmatch(dim)
                elif _is_int(dim):
                    ok = 0 <= dim <= LIMITS["int_max"]
                else:
                    ok = isinstance(dim, str) and DIM_EXPR.fullmatch(dim)
                if not ok:
                    _fail(
                        "values",
                        f"value %{vid} has dimension {str(dim)[:40]!r}; inputs "
                        "have symbols s0, s1, ..., other values integers or s-expressions",
                    )
            example = value.get("example")
            if example is not None and not (
                is_input
                and isinstance(example, list)
                and len(example) == len(value["shape"])
                and all(_is_int(d) and 0 <= d <= LIMITS["int_max"] for d in example)
            ):
                _fail(
                    "values",
                    f"value %{vid} has an example that is not the sizes of an input "
                    "(a list of non-negative integers, one per dimension)",
                )
            self.ranks[vid] = len(value["shape"])
        self.kinds[vid] = kind

    def _node(self, node: dict) -> None:
        op = node["op"]
        info = ops.info(op)
        if info is None:
            head = f"uses op {op[:60]!r}, which is not in the op set (version {ops.OPSET_VERSION})"
            if self.opset < ops.OPSET_VERSION:
                _fail(
                    "ops",
                    f"{head}: it was removed after op-set version {self.opset} (it "
                    "reaches raw memory, storages or PyTorch internals, or was never "
                    "reviewed)",
                    "trace the model again with this tracebridge",
                )
            _fail("ops", head, "the file is corrupt or was made by a newer tracebridge")
        loc = node.get("loc")
        if loc is not None and not _fits(LOC, loc, LIMITS["text_chars"]):
            _fail("names", "loc must be 'path:line' without control characters")
        for key in node["kwargs"]:
            if not _fits(KEYWORD_NAME, key, LIMITS["name_chars"]):
                _fail("names", f"keyword {key[:40]!r} is not an identifier")
        if info.flags & {"structural", "scalar"} and len(node["args"]) != len(info.args):
            _fail(
                "argument kinds", f"{op} takes {len(info.args)} arguments, not {len(node['args'])}"
            )
        for literal in node["args"]:
            self._literal(literal, 0)
        for literal in node["kwargs"].values():
            self._literal(literal, 0)
        self._arguments(info, node)
        problem = views.bool_size(info, node)  # PyTorch takes no bool for a size
        if problem is not None:
            _fail("argument kinds", problem)
        problem = views.problem(node, self.ranks)  # as_strided, repeat_interleave, expands
        if problem is not None:
            _fail("literals", problem)
        if op in ops.AUTOCAST_READS:
            _autocast_device(op, node["args"][0])
        elif op == "prim.setting" and node["args"][0] not in ops.SETTINGS:
            _fail(
                "literals",
                f"prim.setting reads {str(node['args'][0])[:30]!r}, which is not a setting "
                f"(one of {', '.join(ops.SETTINGS)})",
            )
        elif op == "prim.is_device_type" and node["args"][1] not in ops.DEVICE_TYPES:
            _fail(
                "literals",
                f"prim.is_device_type compares with {str(node['args'][1])[:30]!r}, which is "
                f"not a device type (one of {', '.join(ops.DEVICE_TYPES)})",
            )
        reason = self.writes.node(self.index, op, info.flags, info.arg_names, node)
        if reason:
            _fail("state writes", reason, _WRITE_FIX)
        if op == "prim.state":
            state = node["args"][0]
            if state not in self.doc["state"]:
                _fail("state", f"state {str(state)[:60]!r} does not exist")
            if node["outputs"]:
                self.budget.state_read(state, node["outputs"][0]["id"])
        elif "structural" not in info.flags and "scalar" not in info.flags:
            args, kwargs = self._folded(node["args"]), self._folded(node["kwargs"])
            reason = self.budget.node(op, dict(node, args=args, kwargs=kwargs))
            if reason:
                _fail("resource limits", reason)
            self._result_count(op, args)
            self._multipliers(info, args, kwargs)
        if op == "prim.guard":
            kwargs = node["kwargs"]
            if len(node["args"]) != 1 or "expect" not in kwargs or node["outputs"]:
                _fail("guards", "prim.guard needs one argument, an 'expect' keyword and no outputs")
            if kwargs.get("kind", "value") not in ops.GUARD_KINDS:
                _fail(
                    "guards",
                    f"guard kind {str(kwargs.get('kind'))[:20]!r} is not one of "
                    f"{', '.join(ops.GUARD_KINDS)}",
                )
            what = kwargs.get("what", "")
            if not isinstance(what, str) or len(what) > LIMITS["text_chars"]:
                _fail(
                    "guards",
                    f"guard 'what' must be a string of at most {LIMITS['text_chars']} characters",
                )
        if op == AUTOGRAD_FUNCTION:
            self._autograd_function(node)
        if "scalar" in info.flags:
            self._scalar_range(info, node)
            self._fold(info, node)
        self._fold_item(op, node)
        _leaf_count(node.get("out_spec"), len(node["outputs"]), "outputs", "out_spec")
        for value in node["outputs"]:
            self._define(value)

    def _autograd_function(self, node: dict) -> None:
        """The node's own shape; the graphs it names are checked by ``_check_subgraphs``."""
        args, kwargs = node["args"], node["kwargs"]
        items = _elements(args[0]) if len(args) == 1 else None
        if items is None or not all(
            isinstance(x, dict) and "ref" in x and self.kinds.get(x["ref"]) == "Tensor"
            for x in items
        ):
            _fail("graphs", "prim.autograd_function takes one argument: a list of tensor values")
        for key in GRAPH_KEYWORDS:
            if not isinstance(kwargs.get(key), str):
                _fail("graphs", f"prim.autograd_function needs a '{key}' graph name")
        saved = kwargs.get("saved")
        if not _is_int(saved) or saved < 0:
            _fail(
                "graphs", "prim.autograd_function needs a count of 'saved' values (an integer >= 0)"
            )
        if not all(v.get("kind") == "Tensor" for v in node["outputs"]):
            _fail("graphs", "the outputs of prim.autograd_function are tensors")
        marked = kwargs.get("non_differentiable", [])
        if not (
            isinstance(marked, list)
            and all(_is_int(k) and 0 <= k < len(node["outputs"]) for k in marked)
            and len(set(marked)) == len(marked)
        ):
            _fail(
                "graphs",
                "non_differentiable must list distinct positions of the node's outputs",
            )

    # -- literals --

    def _literal(self, lit: Any, depth: int) -> None:
        """Well-formed literal: known tags, defined refs, ints in range."""
        if isinstance(lit, bool) or lit is None or isinstance(lit, str):
            return
        if isinstance(lit, int):
            if not LIMITS["int_min"] <= lit <= LIMITS["int_max"]:
                _fail("resource limits", f"integer {str(lit)[:30]} is outside int64/uint64")
            return
        if isinstance(lit, float):
            return
        if isinstance(lit, list):
            for x in lit:
                self._literal(x, depth + 1)
            return
        if not isinstance(lit, dict) or len(lit) != 1:
            _fail("literals", "a literal object must have exactly one key")
        ((tag, body),) = lit.items()
        if tag == "ref":
            if not isinstance(body, int) or isinstance(body, bool) or body not in self.kinds:
                _fail(
                    "SSA",
                    f"uses %{str(body)[:20]} before it is defined (or never)",
                    "values must be defined by an input or an earlier node",
                )
        elif tag == "float":
            if not isinstance(body, str) or body not in ("inf", "-inf", "nan"):
                _fail("literals", f"float literal {str(body)[:20]!r} is not inf, -inf or nan")
        elif tag in ("tuple", "slice"):
            if not isinstance(body, list) or (tag == "slice" and len(body) != 3):
                _fail("literals", f"malformed {tag} literal")
            for x in body:
                self._literal(x, depth + 1)
        elif tag == "dict":
            if not isinstance(body, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in body
            ):
                _fail("literals", "a dict literal is a list of [key, value] pairs")
            for key, value in body:
                self._literal(key, depth + 1)
                self._literal(value, depth + 1)
        elif tag == "ellipsis":
            if body is not True:
                _fail("literals", 'the ellipsis literal is {"ellipsis": true}')
        elif tag == "dtype":
            if not isinstance(body, str) or body not in dtypes.BY_NAME:
                _fail("literals", f"unknown dtype {str(body)[:20]!r}")
        elif tag == "device":
            if isinstance(body, str) and _META_DEVICE.fullmatch(body):
                _no_meta_device()
            if not _fits(DEVICE, body, 16):
                _fail("literals", f"unknown device {str(body)[:20]!r}")
        elif tag == "memory_format":
            if not isinstance(body, str) or body not in MEMORY_FORMATS:
                _fail("literals", f"unknown memory format {str(body)[:30]!r}")
        elif tag == "layout":
            if not isinstance(body, str) or body != "strided":
                _fail("literals", f"unknown layout {str(body)[:20]!r}")
        elif tag == "generator":
            if not isinstance(body, str) or body not in (self.doc.get("generators") or {}):
                _fail(
                    "literals",
                    f"names the generator {str(body)[:40]!r}, which the program does not "
                    "keep (generators)",
                )
        elif tag == "complex":
            if not (
                isinstance(body, list)
                and len(body) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in body)
            ):
                _fail("literals", "a complex literal is [real, imag]")
        else:
            _fail("literals", f"unknown literal tag {str(tag)[:20]!r}")

    # -- argument kinds --

    def _arguments(self, info: ops.OpInfo, node: dict) -> None:
        args, kwargs = node["args"], node["kwargs"]
        varargs = info.varargs
        for pos, lit in enumerate(args):
            if pos < len(info.args):
                kinds = info.args[pos]
                if varargs is not None and pos >= varargs[0] and _is_number(lit, self.kinds):
                    kinds = (varargs[1],)
            elif varargs is not None and pos >= varargs[0]:
                kinds = (varargs[1],)
            else:
                _fail(
                    "argument kinds",
                    f"{info.name} takes at most {len(info.args)} positional "
                    f"arguments, not {len(args)}",
                )
            if "device" in kinds and isinstance(lit, str) and _META_DEVICE.fullmatch(lit):
                _no_meta_device()
            if not any(_accepts(k, lit, self.kinds) for k in kinds):
                _fail(
                    "argument kinds",
                    f"argument {pos} of {info.name} must be "
                    f"{' or '.join(kinds)}, not {_describe(lit, self.kinds)}",
                )
        for key, lit in kwargs.items():
            kinds = info.kwargs.get(key)
            if kinds is None:
                _fail("argument kinds", f"{info.name} takes no keyword {key!r}")
            if "device" in kinds and isinstance(lit, str) and _META_DEVICE.fullmatch(lit):
                _no_meta_device()
            if not any(_accepts(k, lit, self.kinds) for k in kinds):
                _fail(
                    "argument kinds",
                    f"keyword {key!r} of {info.name} must be "
                    f"{' or '.join(kinds)}, not {_describe(lit, self.kinds)}",
                )
        self._enums(info, node)
        self._sizes(info, node)
        if info.name in _POWERS:
            _power_ok(info, node)

    def _enums(self, info: ops.OpInfo, node: dict) -> None:
        """An enum argument is an integer written in the file, one of the op's values."""
        if not info.enums:
            return
        given = {
            name: lit
            for pos, lit in enumerate(node["args"])
            if pos < len(info.arg_names)
            for name in info.arg_names[pos]
            if name in info.enums
        }
        given.update({k: v for k, v in node["kwargs"].items() if k in info.enums})
        for name, lit in given.items():
            values = info.enums[name]
            if lit is None or (_is_int(lit) and lit in values):
                continue
            _fail(
                "enums",
                f"{name} of {info.name} must be written in the file as one of "
                f"{', '.join(map(str, values))}, not {json.dumps(lit)[:40]}",
            )

    def _sizes(self, info: ops.OpInfo, node: dict) -> None:
        """A size written in the file may not ask for more than literal_numel elements."""
        if self.constants:
            node = dict(node, args=self._folded(node["args"]), kwargs=self._folded(node["kwargs"]))
        sized = [lit for key, lit in node["kwargs"].items() if key in ops.SIZE_ARGUMENTS]
        names = info.arg_names
        sized += [
            lit
            for pos, lit in enumerate(node["args"])
            if pos < len(names) and _is_size_position(info, names[pos], lit)
        ]
        if info.varargs is not None:
            spread = node["args"][info.varargs[0] :]
            if len(spread) > 1:
                sized.append(spread)
        if info.name in ops.SIZE_PRODUCTS and len(sized) > 1:
            sized = [math.prod(_literal_numel(lit) for lit in sized)]
        if info.name in ops.SIZE_RANGES:
            length = _range_length(node)
            if length is not None:
                sized = [length]
        self._scales(info, node)
        for lit in sized:
            numel = _literal_numel(lit)
            if numel > LIMITS["literal_numel"]:
                _fail(
                    "resource limits",
                    f"{info.name} is asked for {numel} elements, more than "
                    f"the limit of {LIMITS['literal_numel']} for a size written in the file",
                )
            size = numel * _width_of(info.name, node["kwargs"])
            if info.name in _ALLOCATING and size > LIMITS["alloc_bytes"]:
                _fail(
                    "resource limits",
                    f"{info.name} is asked for {size} bytes, more than the limit of "
                    f"{LIMITS['alloc_bytes']} for a size written in the file",
                )
            self.literal_total += numel
            if self.literal_total > LIMITS["graph_literal_numel"]:
                _fail(
                    "resource limits",
                    f"the sizes written in this graph ask for {self.literal_total} elements "
                    f"in all, more than the limit of {LIMITS['graph_literal_numel']}",
                )

    def _scales(self, info: ops.OpInfo, node: dict) -> None:
        """An integer of class ``scale`` (ir/ops.py: a padding, an FFT length ``s``, a
        diagonal offset, an output size) written in the file is at most ``literal_numel``
        in magnitude: it enlarges a result by about as many elements. The result's bytes,
        with the operands' shapes, are bounded at the call (runtime/checked_sizes.py) and,
        where the file decides the operands, by the meta rule (check/budget.py)."""
        if "scale" not in info.ints.values():
            return
        scaled = [lit for key, lit in node["kwargs"].items() if info.ints.get(key) == "scale"]
        scaled += [
            lit
            for pos, lit in enumerate(node["args"])
            if any(info.ints.get(n) == "scale" for n in _names_at(info, pos))
        ]
        for lit in scaled:
            for x in _elements(lit) or [lit]:
                if _is_int(x) and abs(x) > LIMITS["literal_numel"]:
                    _fail(
                        "resource limits",
                        f"{info.name} is given {x} for an argument that enlarges its result "
                        f"(a padding, a length, an offset), more than the limit of "
                        f"{LIMITS['literal_numel']} for a size written in the file",
                    )

    def _multipliers(self, info: ops.OpInfo, args: list, kwargs: dict) -> None:
        """Scale factors and ``combinations``' ``r`` multiply their input's size (known only
        at the call): what the file writes is bounded by ``scale_product`` and
        ``combinations_r``."""
        named = {n: lit for pos, lit in enumerate(args) for n in _names_at(info, pos)}
        named.update(kwargs)
        if info.name == "combinations":
            r = named.get("r")
            if _is_int(r) and r > LIMITS["combinations_r"]:
                _fail(
                    "resource limits",
                    f"combinations is asked for r = {r}, more than the limit of "
                    f"{LIMITS['combinations_r']}",
                )
            return
        # Each argument once: a position has a name per overload (upsample_nearest2d's third
        # is ``scale_factors`` in one and ``scales_h`` in the other), and counted under both
        # names an 8x upsampling (64) would count as 4096.
        scales = [
            lit
            for pos, lit in enumerate(args)
            if any(n.startswith("scale") for n in _names_at(info, pos))
        ]
        scales += [lit for name, lit in kwargs.items() if name.startswith("scale")]
        product = 1.0
        for lit in scales:
            for x in _elements(lit) or [lit]:
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    product *= max(abs(float(x)), 1.0)
        if product > LIMITS["scale_product"]:
            _fail(
                "resource limits",
                f"{info.name} is given scale factors that multiply to {product:g}, more than "
                f"the limit of {LIMITS['scale_product']}",
            )

    def _result_count(self, op: str, args: list) -> None:
        """``tensor_split(x, n)`` (and ``hsplit``, ...) makes ``n`` tensors: a literal ``n``
        past ``LIMITS["results"]`` would take minutes and gigabytes before the runtime could
        compare the count with the node's outputs."""
        count = args[1] if op in SECTIONED_OPS | _LISTED_SIZES and len(args) > 1 else None
        if isinstance(count, dict) and set(count) == {"tuple"}:
            count = count["tuple"]
        if isinstance(count, list):  # sizes or indices: one result each (indices: one more)
            count = len(count) + (op not in _LISTED_SIZES)
        if _is_int(count) and count > LIMITS["results"]:
            _fail(
                "resource limits",
                f"{op} is asked for {count} results, more than the limit of {LIMITS['results']}",
            )

    def _folded(self, lits: Any) -> Any:
        """Arguments with folded values in place of references, one list or tuple deep (as
        sizes are written)."""
        if isinstance(lits, dict):
            return {k: self._folded_one(v) for k, v in lits.items()}
        return [self._folded_one(v) for v in lits]

    def _folded_one(self, lit: Any) -> Any:
        if isinstance(lit, list):
            return [self._constant(x) for x in lit]
        if isinstance(lit, dict) and set(lit) == {"tuple"} and isinstance(lit["tuple"], list):
            return {"tuple": [self._constant(x) for x in lit["tuple"]]}
        return self._constant(lit)

    def _fold(self, info: ops.OpInfo, node: dict) -> None:
        """Remember the integer a scalar op computes from integer literals (or from values
        folded before), for ``_sizes``."""
        if info.name not in _FOLDABLE or len(node["outputs"]) != 1:
            return
        args = [self._constant(a) for a in node["args"]]
        if not all(_is_int(a) and abs(a) < _EXACT for a in args):
            return
        try:  # the runtime's own bounded arithmetic: what a call would compute
            value = ops.SCALAR_OPS[info.name](*args)
        except ops.ScalarRangeError:
            value = _HUGE
        except (ArithmeticError, ValueError):
            return  # a zero divisor, a negative shift: no size
        if _is_int(value):
            self.constants[node["outputs"][0]["id"]] = value if abs(value) < _EXACT else _HUGE

    def _fold_item(self, op: str, node: dict) -> None:
        """``prim.item``/``prim.int`` of a one-element ``tensor`` literal is that literal:
        a size written as ``zeros(prim.item(tensor(2**40)))`` counts as one written in the
        file (the call would bound it too, but the checker also sees what it multiplies)."""
        args, outputs = node["args"], node["outputs"]
        if len(outputs) != 1 or len(args) != 1:
            return
        if op == "tensor":
            data = args[0]
            while isinstance(data, list) and len(data) == 1:
                data = data[0]
            if _is_int(data):
                self.literal_items[outputs[0]["id"]] = data
        elif op in ("prim.item", "prim.int") and isinstance(args[0], dict):
            value = self.literal_items.get(args[0].get("ref"))
            if value is not None:
                self.constants[outputs[0]["id"]] = value if abs(value) < _EXACT else _HUGE

    def _constant(self, lit: Any) -> Any:
        """``lit`` with a reference to a folded value replaced by that value."""
        if isinstance(lit, dict) and set(lit) == {"ref"} and lit["ref"] in self.constants:
            return self.constants[lit["ref"]]
        return lit

    def _scalar_range(self, info: ops.OpInfo, node: dict) -> None:
        """A literal exponent or shift past 64 leaves int64 for any base but a literal 0
        (and 1 and -1 for ``pow``): ``scalar.pow(7, 10**9)`` would take minutes and
        gigabytes."""
        args = node["args"]
        if info.name not in ("scalar.pow", "scalar.lshift") or len(args) != 2:
            return
        ints = [isinstance(a, int) and not isinstance(a, bool) for a in args]
        harmless = (1 if info.name == "scalar.pow" else 0) if ints[0] else -1
        if ints[1] and abs(args[1]) > 64 and not (ints[0] and abs(args[0]) <= harmless):
            _fail(
                "resource limits",
                f"{info.name} by {args[1]} leaves the range of traced numbers (int64)",
            )


# ``matrix_power(x, n)``: PyTorch's kernel negates a negative ``n`` and loops while it is
# not 0; ``-2**63`` stays negative, and the call never returns (prober21c F8).
_POWERS = frozenset({"matrix_power", "linalg.matrix_power"})


def _power_ok(info: ops.OpInfo, node: dict) -> None:
    n = node["args"][1] if len(node["args"]) > 1 else node["kwargs"].get("n")
    if _is_int(n) and n <= -(2**63):
        _fail(
            "resource limits",
            f"{info.name} is given the power {n}, whose negation is not an int64: PyTorch's "
            "kernel would never return",
        )


def _is_size_position(info: ops.OpInfo, names: tuple[str, ...], lit: Any) -> bool:
    """Whether ``lit``, written at a position whose parameter is one of ``names`` (one per
    overload), is a size argument: not where the size parameters there are lists and
    ``lit`` is a bare int, which only the other parameter takes (``randint(0, 2**31 - 1,
    (8,))``: position 1 is ``size`` in ``randint(high, size)`` and ``high`` here;
    prober21c F10 found ``high`` counted as 2**31 - 1 elements)."""
    sized = ops.SIZE_ARGUMENTS.intersection(names)
    if not sized:
        return False
    if len(sized) < len(set(names)) and _is_int(lit):
        return any("int" in info.kwargs.get(n, ("int",)) for n in sized)
    return True


def _names_at(info: ops.OpInfo, position: int) -> tuple[str, ...]:
    return info.arg_names[position] if position < len(info.arg_names) else ()


# Ops that allocate what their size arguments ask for, and the widths of their default
# dtypes (float32; int64 for these; complex64 for the FFTs, whose ``n`` is a length).
_ALLOCATING = frozenset(
    """zeros ones full empty rand randn randint randperm arange linspace logspace eye
    tril_indices triu_indices Tensor.new_zeros Tensor.new_ones Tensor.new_full
    Tensor.new_empty one_hot histc bincount multinomial""".split()
) | frozenset(name for name in ops.OPS if name.startswith("fft."))
_COMPLEX_DEFAULT = frozenset(name for name in ops.OPS if name.startswith("fft."))
_INT64_DEFAULT = frozenset(
    "randint randperm arange tril_indices triu_indices one_hot bincount multinomial".split()
)


def _width_of(op: str, kwargs: dict) -> int:
    """Bytes of one element of what ``op`` makes: its ``dtype`` literal's width, else that
    of its default dtype (``Tensor.new_*`` keep their input's: the widest, 16, is assumed)."""
    dtype = kwargs.get("dtype")
    if isinstance(dtype, dict) and isinstance(dtype.get("dtype"), str):
        return dtypes.ITEMSIZE.get(dtype["dtype"], 16)
    if op.startswith("Tensor.new_"):
        return 16
    return 8 if op in _INT64_DEFAULT or op in _COMPLEX_DEFAULT else 4


# Ops whose second argument, an integer, is the number of their results (at most, for
# ``chunk``: a dimension of size 0 is split into that many empty tensors).
SECTIONED_OPS = frozenset("tensor_split hsplit vsplit dsplit chunk".split())
# Ops that make one result per size of a list the file writes.
_LISTED_SIZES = frozenset("split split_with_sizes".split())

# Ops whose result has the broadcast shape of their tensor arguments (for check/budget.py).
_ELEMENTWISE = frozenset(
    name
    for family in ("elementwise math", "comparison and logic", "activations")
    for name in ops.FAMILIES[family].split()
)

# Integer scalar ops the checker folds on literals, with the runtime's implementations
# (ops.SCALAR_OPS, bounded to the range of traced numbers); the others cannot make a size
# larger than their arguments.
_FOLDABLE = frozenset(
    "scalar.add scalar.sub scalar.mul scalar.floordiv scalar.pow scalar.lshift scalar.neg "
    "scalar.abs".split()
)
# Folded values are exact below 2**53 in both checkers (R computes in doubles); a result at
# or past it, or past the range of traced numbers, is one huge value (as a size, refused),
# and folding stops there: the two checkers give every file the same verdict.
_EXACT = 2**53
_HUGE = LIMITS["int_max"]


def _range_length(node: dict) -> int | None:
    """``ceil((end - start) / step)`` of ``arange(end)`` / ``arange(start, end, step)`` when
    all three are numbers written in the file; None when one is traced (or not a number)."""
    numbers = []
    for lit in node["args"]:
        if isinstance(lit, bool) or not isinstance(lit, (int, float)):
            return None
        numbers.append(lit)
    start, end, step = 0, None, 1
    if len(numbers) == 1:
        end = numbers[0]
    elif len(numbers) > 1:
        start, end = numbers[:2]
        step = numbers[2] if len(numbers) > 2 else 1
    kwargs = node["kwargs"]
    start, end, step = kwargs.get("start", start), kwargs.get("end", end), kwargs.get("step", step)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (start, end, step)):
        return None
    length = (float(end) - float(start)) / float(step) if step != 0 else math.nan
    if math.isnan(length):
        return None  # PyTorch refuses a zero step and infinite ends itself
    return max(math.ceil(length), 0) if math.isfinite(length) else LIMITS["int_max"]


def _literal_numel(lit: Any) -> int:
    """Elements asked for by a size literal: the product of its positive integers."""
    if isinstance(lit, bool):
        return 1
    if isinstance(lit, int):
        return max(lit, 1)
    if isinstance(lit, dict) and "tuple" in lit:
        lit = lit["tuple"]
    if isinstance(lit, list):
        total = 1
        for x in lit:
            if isinstance(x, int) and not isinstance(x, bool) and x > 0:
                total *= x
                if total > LIMITS["literal_numel"]:
                    return total
        return total
    return 1


def _autocast_device(op: str, device: str) -> None:
    """The device type of an autocast read (a string: its argument kind): one that torch
    keeps autocast state for (SPEC section 7: a reader MUST refuse another). Refused here, at
    load, not where the runtime reads it: a read no guard needs may never run, and a file
    that names another device type is corrupt whether or not a call reaches it."""
    if device not in ops.AUTOCAST_DEVICE_TYPES:
        _fail(
            "literals",
            f"{op} reads the autocast of device type {device[:30]!r}, which torch keeps no "
            f"autocast state for (one of {', '.join(ops.AUTOCAST_DEVICE_TYPES)})",
        )


def _var_keywords(names, keys: list) -> None:
    """A graph's ``var_keywords``: the keys of ``in_spec``'s keyword dict (``keys``) that
    went into the callable's ``**kwargs``, each once, in the order the dict lists them
    (a runtime compares a call's order with it)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        _fail("specs", "var_keywords must be a list of keyword names")
    positions = [keys.index(n) if n in keys else -1 for n in names]
    if -1 in positions:
        missing = names[positions.index(-1)]
        _fail("specs", f"var_keywords names {missing[:40]!r}, which is no key of in_spec's kwargs")
    if positions != sorted(set(positions)):
        _fail(
            "specs", "var_keywords must list distinct keys in the order in_spec's kwargs has them"
        )


def _positional_only(graph: dict, keys: list) -> None:
    """A graph's ``positional_only``: how many leading ``arg_names`` are positional-only,
    at most all of them; such a name among the keyword keys is a ``**kwargs`` entry, so
    ``var_keywords`` names it (Python binds no keyword to a positional-only parameter)."""
    count = graph.get("positional_only", 0)
    names = graph.get("arg_names", [])
    if type(count) is not int or not 0 <= count <= len(names):
        _fail("specs", f"positional_only must be a count of arg_names, 0 to {len(names)}")
    var_keywords = graph.get("var_keywords", [])
    for name in names[:count]:
        if name in keys and name not in var_keywords:
            _fail(
                "specs",
                f"in_spec passes positional-only parameter {name[:40]!r} by keyword, "
                "outside var_keywords",
            )


def _defaults(graph: dict, keys: list) -> None:
    """A graph's ``defaults``: each names a parameter of ``arg_names`` or a keyword of
    ``in_spec``, and is null or a ``none`` or ``const`` spec whose value is a bool, an int
    of int64/uint64, a finite float or a string of at most 4096 characters."""
    defaults = graph.get("defaults", {})
    names = set(graph.get("arg_names", [])) | {k for k in keys if isinstance(k, str)}
    for name, spec in defaults.items():
        if name not in names:
            _fail("specs", f"defaults names {name[:40]!r}, which is no parameter of the graph")
        _default_spec(name, spec)
    keyword = graph.get("keyword_defaults", {})
    if not isinstance(keyword, dict):
        _fail("specs", "keyword_defaults must be an object")
    for name, spec in keyword.items():
        if not (isinstance(name, str) and name.isidentifier()) or name in names:
            _fail(
                "specs",
                f"keyword_defaults names {str(name)[:40]!r}, which is no keyword-only "
                "parameter the example left out (a name, not in arg_names or the keywords)",
            )
        if spec is None:
            _fail("specs", f"the default of {name[:40]!r} in keyword_defaults is null")
        _default_spec(name, spec)


def _distinct_inputs(groups, inputs: int) -> None:
    """A graph's ``distinct_inputs``: a list of groups, each a list of at least two
    distinct input positions (integers below the number of inputs)."""
    good = isinstance(groups, list) and all(
        isinstance(group, list)
        and len(group) >= 2
        and all(type(p) is int and 0 <= p < inputs for p in group)
        and len(set(group)) == len(group)
        for group in groups
    )
    if not good:
        _fail(
            "specs",
            "distinct_inputs must be a list of groups, each of at least two distinct input "
            f"positions below {inputs}",
        )


def _default_spec(name: str, spec) -> None:
    """A default of ``defaults`` or ``keyword_defaults``: null, a ``none`` spec, or a
    ``const`` spec of a bool, an int64/uint64, a finite float or a short string."""
    if spec is None or spec == {"t": "none"}:
        return
    value = spec.get("v") if isinstance(spec, dict) and spec.get("t") == "const" else None
    kind = type(value)
    holdable = (
        (kind is int and -(2**63) <= value < 2**64)
        or (kind is float and math.isfinite(value))
        or kind is bool
        or (kind is str and len(value) <= 4096)
    )
    if not isinstance(spec, dict) or set(spec) != {"t", "v"} or not holdable:
        _fail(
            "specs",
            f"the default of {name[:40]!r} must be null, a none spec or a const spec of "
            "a bool, an int64, a finite float or a string",
        )


def _leaf_count(spec: Any, count: int, what: str, field: str) -> None:
    leaves = _leaves(spec, 0)
    if leaves != count:
        _fail("specs", f"{count} {what} but {field} has {leaves} leaves")


_SPEC_FIELDS = {
    "leaf": (),
    "none": (),
    "const": ("v",),
    "tuple": ("c",),
    "list": ("c",),
    "dict": ("keys", "c"),
    "namedtuple": ("name", "fields", "c"),
}


def _leaves(spec: Any, depth: int) -> int:
    if spec is None:
        return 0
    if not isinstance(spec, dict):
        _fail("specs", "a spec must be an object")
    t = spec.get("t")
    missing = [f for f in _SPEC_FIELDS.get(t, ()) if f not in spec]
    if missing:
        _fail("specs", f"a {t} spec needs the field {missing[0]!r}")
    if t == "leaf":
        return 1
    if t in ("none", "const"):
        return 0
    children = spec["c"]
    if t == "dict" and len(spec["keys"]) != len(children):
        _fail("specs", "a dict spec needs as many keys as children")
    if t == "dict" and not all(isinstance(k, (str, int)) for k in spec["keys"]):
        _fail("specs", "dict spec keys are strings or integers")
    if t == "namedtuple":
        _namedtuple_names(spec, len(children))
    if "size" in spec and (
        spec["size"] is not True
        or t != "tuple"
        or not all(isinstance(c, dict) and c.get("t") in ("leaf", "const") for c in children)
    ):
        _fail("specs", "'size' marks a tuple of leaves and constants (a torch.Size): true only")
    return sum(_leaves(c, depth + 1) for c in children)


def _namedtuple_names(spec: dict, children: int) -> None:
    """A named tuple's class name is a dotted path of identifiers and its fields distinct
    identifiers that ``collections.namedtuple`` takes (no keyword, no leading ``_``)."""
    name, fields = spec["name"], spec["fields"]
    if (
        not isinstance(name, str)
        or len(name) > LIMITS["name_chars"]
        or not all(p.isidentifier() and p.isascii() for p in name.split("."))
    ):
        _fail("specs", f"a namedtuple's name {str(name)[:40]!r} is not a dotted path of names")
    good = isinstance(fields, list) and all(
        isinstance(f, str)
        and f.isidentifier()
        and f.isascii()
        and not keyword.iskeyword(f)
        and not f.startswith("_")
        and len(f) <= LIMITS["name_chars"]
        for f in fields
    )
    if not good or len(set(fields)) != len(fields):
        _fail("specs", f"the fields of namedtuple {name[:40]!r} are not distinct plain names")
    if len(fields) != children:
        _fail("specs", "a namedtuple spec needs as many fields as children")


def _no_meta_device():
    _fail(
        "devices",
        "the file names the meta device: a meta tensor holds no data, and kernels given one "
        "beside tensors with data return memory they never wrote",
        "trace on the device the program runs on, or take the device from a tensor "
        "(x.device is recorded as prim.device)",
    )


_NUMBER_KINDS = ("int", "float", "bool")


def _lit_kind(lit: Any, kinds: dict[int, str]) -> str:
    if lit is None:
        return "none"
    if isinstance(lit, bool):
        return "bool"
    if isinstance(lit, int):
        return "int"
    if isinstance(lit, float):
        return "float"
    if isinstance(lit, str):
        return "str"
    if isinstance(lit, list):
        return "list"
    ((tag, body),) = lit.items()
    if tag == "ref":
        return _REF_KIND[kinds[body]]
    if tag == "float":
        return "float"
    if tag == "tuple":
        return "list"
    return tag


def _names_generator(lit: Any) -> bool:
    """Whether a literal is or holds a generator reference."""
    if isinstance(lit, list):
        return any(_names_generator(x) for x in lit)
    if not isinstance(lit, dict) or len(lit) != 1:
        return False
    ((tag, body),) = lit.items()
    if tag == "generator":
        return True
    if tag in ("tuple", "slice") and isinstance(body, list):
        return any(_names_generator(x) for x in body)
    if tag == "dict" and isinstance(body, list):
        return any(_names_generator(x) for pair in body if isinstance(pair, list) for x in pair)
    return False


def _is_number(lit: Any, kinds: dict[int, str]) -> bool:
    return _lit_kind(lit, kinds) in ("int", "bool")


def _elements(lit: Any) -> list | None:
    if isinstance(lit, list):
        return lit
    if isinstance(lit, dict) and "tuple" in lit:
        return lit["tuple"]
    return None


# Which literal kinds each argument kind takes. Tensors stand in for numbers, as PyTorch
# takes a 0-dim tensor wherever it takes a number.
_TAKES = {
    "tensor": {"tensor"},
    "index_tensor": {"tensor"},
    "int": {"int", "bool", "tensor"},
    "dim": {"int", "bool", "tensor"},
    "index": {"int", "bool", "tensor"},
    "float": {"int", "float", "bool", "tensor"},
    "scalar": {"int", "float", "bool", "complex", "tensor"},
    "bool": {"bool", "tensor"},
    "dtype": {"dtype"},
    "device": {"device", "str", "int"},
    "layout": {"layout"},
    "memory_format": {"memory_format"},
    "str": {"str"},
    "none": {"none"},
    "generator": {"generator"},
}
_ELEMENT = {
    "ints": "int",
    "dims": "dim",
    "floats": "float",
    "bools": "bool",
    "scalars": "scalar",
    "tensors": "tensor",
}


def _accepts(kind: str, lit: Any, kinds: dict[int, str]) -> bool:
    have = _lit_kind(lit, kinds)
    if have == "generator":  # a random op's generator=, and nothing else
        return kind == "generator"
    if kind == "any":
        return True
    if kind in _TAKES:
        return have in _TAKES[kind]
    if kind in _ELEMENT:
        element = _ELEMENT[kind]
        if have == "list" and isinstance(lit, dict) and "ref" in lit:
            return True  # a traced list (sizes) from an earlier node
        items = _elements(lit)
        if items is None:
            # A lone number stands for a list of one (stride=2 means (2, 2)).
            return kind != "tensors" and _accepts(element, lit, kinds)
        optional = kind == "tensors"  # Tensor?[] (index lists) hold None
        return all((optional and x is None) or _accepts(element, x, kinds) for x in items)
    if kind == "index_expr":
        return _index_ok(lit, kinds)
    if kind == "data":
        return _data_ok(lit, kinds)
    return False


def _index_ok(lit: Any, kinds: dict[int, str]) -> bool:
    have = _lit_kind(lit, kinds)
    if have in ("int", "bool", "none", "ellipsis", "tensor"):
        return True
    if have == "slice":
        return all(
            x is None or _lit_kind(x, kinds) in ("int", "bool", "tensor") for x in lit["slice"]
        )
    items = _elements(lit)
    return items is not None and all(_index_ok(x, kinds) for x in items)


def _data_ok(lit: Any, kinds: dict[int, str]) -> bool:
    have = _lit_kind(lit, kinds)
    if have in ("int", "float", "bool", "complex", "tensor"):
        return True
    items = _elements(lit)
    return items is not None and all(_data_ok(x, kinds) for x in items)


def _describe(lit: Any, kinds: dict[int, str]) -> str:
    have = _lit_kind(lit, kinds)
    text = json.dumps(lit)[:40]
    return f"{have} {text}"


def is_finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
