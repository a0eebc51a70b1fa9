"""Random programs: the generated code and the interpreter give eager PyTorch's answers.

Each case is a random Python function over one tensor (elementwise ops, reductions, size
arithmetic with negative constants, powers and unary minus nested without regard to
precedence, branches on sizes), traced once, saved and loaded, then run by both runtimes
on the example and on inputs of other sizes. A call either matches eager exactly or, where
the trace fixed a decision, raises GuardError in both runtimes.
"""

from __future__ import annotations

import random

import pytest
import torch

import tracebridge
from tracebridge.api import TracedFunction
from tracebridge.errors import GuardError

SEED = 20261123
CASES = 300
UNARY = ["torch.neg", "torch.abs", "torch.tanh", "torch.sigmoid", "torch.relu", "torch.sin"]
REDUCE = ["sum", "mean", "amax"]
INT_BASES = [-3, -2, -1, 2, 3]


class _Program:
    """Writes the source of one random function, statement by statement."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.lines: list[str] = []
        self.tensors = ["x"]
        self.ints: list[str] = []
        self.sizes: list[str] = []  # ints read from x.shape: never negative

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{len(self.lines)}"

    def int_atom(self) -> str:
        r = self.rng
        if self.ints and r.random() < 0.7:
            return r.choice(self.ints)
        return str(r.randint(-4, 4))

    def int_expr(self, depth: int = 0, top_float: bool = False) -> str:
        """An int expression over sizes; parentheses and unary minus wherever they fall.
        ``top_float``: the whole may be a negative power (a float), never a part of it
        (bitwise operators take ints only)."""
        r = self.rng
        if top_float and self.sizes and r.random() < 0.25:
            return f"(2 ** -{r.choice(self.sizes)})"
        if depth > 2 or r.random() < 0.3:
            atom = self.int_atom()
            return f"({atom})" if atom.startswith("-") and r.random() < 0.5 else atom
        kind = r.randrange(5)
        left, right = self.int_expr(depth + 1), self.int_expr(depth + 1)
        if kind == 0:
            return f"({left} {r.choice(['+', '-', '*'])} {right})"
        if kind == 1:  # a constant divisor, never zero
            divisor = r.choice([-3, -2, 2, 3])
            return f"({left} {r.choice(['//', '%'])} {divisor})"
        if kind == 2:  # a power of a (maybe negative) base, written with or without parens
            base = r.choice(INT_BASES)
            exponent = r.choice(self.sizes) if self.sizes else str(r.randint(0, 3))
            spelled = f"({base})" if base < 0 and r.random() < 0.5 else str(base)
            return f"({spelled} ** {exponent})"
        if kind == 3:
            return f"-{left}" if not left.startswith("-") else f"-({left})"
        return f"({left} {r.choice(['&', '|', '^'])} {right})"

    def step(self) -> None:
        r = self.rng
        kind = r.randrange(7)
        t = r.choice(self.tensors)
        if kind == 0:
            self.assign_tensor(f"{r.choice(UNARY)}({t})")
        elif kind == 1:
            other = r.choice(self.tensors)
            self.assign_tensor(f"{t} {r.choice(['+', '-', '*'])} {other}")
        elif kind == 2:
            dim = r.randrange(2)
            self.assign_tensor(f"{t}.{r.choice(REDUCE)}(dim={dim}, keepdim=True)")
        elif kind == 3:
            name = self.fresh("n")
            self.lines.append(f"{name} = x.shape[{r.randrange(2)}]")
            self.ints.append(name)
            self.sizes.append(name)
        elif kind == 4 and self.ints:
            name = self.fresh("n")
            self.lines.append(f"{name} = {self.int_expr()}")
            self.ints.append(name)
        elif kind == 5 and self.ints:
            self.assign_tensor(f"{t} * {self.int_expr(top_float=True)}")
        elif kind == 6 and self.ints:
            name = self.fresh("t")
            test = f"{r.choice(self.ints)} {r.choice(['>', '==', '<='])} {r.randint(1, 4)}"
            self.lines.append(f"if {test}:")
            self.lines.append(f"    {name} = {t} + 1")
            self.lines.append("else:")
            self.lines.append(f"    {name} = {t} - 1")
            self.tensors.append(name)

    def assign_tensor(self, expr: str) -> None:
        name = self.fresh("t")
        self.lines.append(f"{name} = {expr}")
        self.tensors.append(name)

    def source(self, steps: int) -> str:
        for _ in range(steps):
            self.step()
        result = [self.tensors[-1], self.rng.choice(self.tensors)]
        if self.ints:
            result.append(self.rng.choice(self.ints))
        body = "\n".join("    " + line for line in self.lines)
        return f"def fn(x):\n{body}\n    return ({', '.join(result)},)\n"


def _make(case: int):
    rng = random.Random(SEED + case)
    source = _Program(rng).source(rng.randint(4, 12))
    namespace = {"torch": torch}
    exec(compile(source, f"<case {case}>", "exec"), namespace)  # noqa: S102 - test's own code
    return namespace["fn"], source


def _same(got, want) -> bool:
    if isinstance(want, torch.Tensor):
        return (
            isinstance(got, torch.Tensor)
            and got.shape == want.shape
            and got.dtype == want.dtype
            and torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
            and torch.equal(got.isnan(), want.isnan())
        )
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(map(_same, got, want))
    return type(got) is type(want) and got == want


def _outcome(fn, x):
    try:
        return fn(x)
    except GuardError as e:
        return e


@pytest.mark.parametrize("block", range(6))
def test_random_programs_agree_with_eager(block, tmp_path):
    per_block = CASES // 6
    shapes = [(2, 3), (3, 2), (4, 4), (1, 3)]
    for case in range(block * per_block, (block + 1) * per_block):
        fn, source = _make(case)
        example = torch.randn(2, 3)
        traced = tracebridge.trace(fn, example, check_trace=False)
        path = tmp_path / f"{case}.tb"
        traced.save(path)
        runtimes = {
            "codegen": traced,
            "interpreter": TracedFunction(traced.program, runtime="interpreter"),
            "loaded codegen": tracebridge.load(path),
            "loaded interpreter": tracebridge.load(path, runtime="interpreter"),
        }
        for shape in shapes:
            x = torch.randn(*shape)
            want = fn(x)
            outcomes = {name: _outcome(run, x) for name, run in runtimes.items()}
            guarded = [isinstance(o, GuardError) for o in outcomes.values()]
            context = f"case {case}, input {shape}:\n{source}\n{traced.code}"
            if shape == (2, 3):
                assert not any(guarded), context
            assert all(guarded) or not any(guarded), f"{context}\n{outcomes}"
            if not any(guarded):
                for name, got in outcomes.items():
                    assert _same(got, want), f"{name} differs from eager in {context}"
