"""Arguments for the op contract test: one crafted node per case, within the op's declared
kinds (``shared_ir/ops.json``) but with shapes that do not fit, short weights, enums and
indices out of range, odd dtypes, empty and zero-size tensors.

``case(op, rng)`` gives the nodes of a one-op program: literal tensors (``tensor`` nodes,
so that the data is in the file and two calls see the same values), then the op. The
generator never reads the op's meaning: it only knows the kinds, as an attacker who reads
``ops.json`` would.
"""

from __future__ import annotations

import random

from tracebridge.ir import ops

DTYPES = ("float32", "float64", "int64", "int32", "uint8", "bool", "complex64", "float16")
INTS = (-3, -2, -1, 0, 1, 2, 3, 4, 7, 64, 2**31, -(2**31), 2**62)
FLOATS = (0.0, 0.5, -1.0, 2.0, 1e30, -1e-30, {"float": "nan"}, {"float": "inf"})
STRINGS = (
    "mean sum none max amax amin prod reflect replicate circular constant left right ij xy "
    "fro nuc L U bilinear nearest tanh reduced complete ij valid same floor trunc"
).split()
MEMORY_FORMATS = ("contiguous_format", "channels_last", "preserve_format", "channels_last_3d")


class Case:
    """The nodes of one case under construction (value ids from 1; 0 is the input)."""

    def __init__(self, rng: random.Random):
        self.rng, self.nodes, self.next_id = rng, [], 1

    def _new(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def tensor(self, dtype: str | None = None, index: bool = False) -> dict:
        rng = self.rng
        dtype = dtype or ("int64" if index else rng.choice(DTYPES))
        rank = rng.choice((0, 1, 1, 2, 2, 3, 4))
        shape = [rng.choice((0, 1, 1, 2, 3, 4)) for _ in range(rank)]
        data = self._data(shape, dtype, index)
        vid = self._new()
        out = {"id": vid, "kind": "Tensor", "dtype": dtype, "shape": shape}
        self.nodes.append(
            {
                "op": "tensor",
                "args": [data],
                "kwargs": {"dtype": {"dtype": dtype}},
                "outputs": [out],
                "out_spec": {"t": "leaf"},
            }
        )
        return {"ref": vid}

    def _data(self, shape: list[int], dtype: str, index: bool):
        rng = self.rng
        if not shape:
            if dtype == "bool":
                return rng.random() < 0.5
            if index:
                return rng.choice((-9, -1, 0, 1, 2, 3, 9, 2**40))
            if dtype.startswith("float") or dtype.startswith("complex"):
                return round(rng.uniform(-3, 3), 2)
            low = 0 if dtype in ("uint8",) else -4
            return rng.randint(low, 5)
        return [self._data(shape[1:], dtype, index) for _ in range(shape[0])]

    def value(self, kind: str):
        """A literal (or a new tensor) of argument kind ``kind``."""
        rng = self.rng
        if kind in ("tensor",):
            return self.tensor()
        if kind == "index_tensor":
            return self.tensor(index=True)
        if kind == "tensors":
            return [self.tensor() for _ in range(rng.choice((0, 1, 2, 3)))]
        if kind in ("int", "dim", "index"):
            return rng.choice(INTS)
        if kind in ("ints", "dims"):
            return [rng.choice(INTS[:9]) for _ in range(rng.choice((0, 1, 2, 3)))]
        if kind == "float":
            return rng.choice(FLOATS)
        if kind == "floats":
            return [rng.choice(FLOATS[:6]) for _ in range(rng.choice((1, 2, 3)))]
        if kind in ("scalar", "scalars"):
            return rng.choice((0, 1, -2, 2.5, True, {"complex": [1.0, -1.0]}, {"float": "nan"}))
        if kind in ("bool", "bools"):
            return rng.random() < 0.5
        if kind == "dtype":
            return {"dtype": rng.choice(DTYPES)}
        if kind == "device":
            return {"device": rng.choice(("cpu", "meta"))}
        if kind == "layout":
            return {"layout": "strided"}
        if kind == "memory_format":
            return {"memory_format": rng.choice(MEMORY_FORMATS)}
        if kind == "str":
            return rng.choice(STRINGS)
        if kind == "index_expr":
            return rng.choice((0, -1, 5, None, {"slice": [None, 2, None]}, [0, 1]))
        if kind == "data":
            return [[1, 2], [3, 4]]
        if kind == "list":
            return [1, 2]
        return None  # none, any

    def argument(self, kinds: tuple[str, ...], enum: tuple[int, ...] | None):
        if enum is not None and self.rng.random() < 0.5:
            return self.rng.choice((*enum, -1, max(enum) + 1, 99))
        return self.value(self.rng.choice(kinds))


def case(op: str, rng: random.Random) -> list[dict]:
    """The nodes of one random case of op ``op``; the op's node is last, with one output."""
    info = ops.info(op)
    built = Case(rng)
    count = rng.randint(min(1, len(info.args)), len(info.args)) if info.args else 0
    args = []
    for position in range(count):
        names = info.arg_names[position] if position < len(info.arg_names) else ()
        enum = next((info.enums[n] for n in names if n in info.enums), None)
        args.append(built.argument(info.args[position], enum))
    out = {"id": built._new(), "kind": "Tensor", "dtype": "float32", "shape": ["?"]}
    built.nodes.append(
        {"op": op, "args": args, "kwargs": {}, "outputs": [out], "out_spec": {"t": "leaf"}}
    )
    return built.nodes


def contract_ops() -> list[str]:
    """Every op of the set a file can name with arguments (structural and scalar ops have
    their own rules and tests)."""
    return [n for n, i in ops.OPS.items() if not (i.flags & {"structural", "scalar"})]
