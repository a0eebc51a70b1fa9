"""A refused call loses nothing: the state a graph writes is put back when the call fails.

Note: why. A graph runs its nodes in order, and a guard checks where the traced code made
its decision: BatchNorm in training mode updates its running statistics (and a module its
counter or cache buffer) before a later ``if`` on the result refuses the call. Without
this, the caller gets a GuardError and a model whose buffers moved -- and a method with
size-1 specialisations (runtime/method.py's ``Specialised``) would then run the next graph
on top of that write, updating the statistics twice. So a graph that may both write in
place (buffers, parameters such as ``embedding``'s renormalised rows, or its own inputs)
and refuse a call after it began (a guard, an op whose number of results the trace fixed)
runs as a transaction: the tensors it may write are copied before the call and copied back
when the call raises (a refusal or any other error), so a failed call leaves every tensor
as it was. Only tensors written before the graph's last node that may refuse are copied
(a KV cache written after the checks is not), and a graph with none (it writes nothing,
or its checks all stand before its first write) is not wrapped: its calls cost what they
cost before. What is written is found once, from the graph (check/state_writes.py's
``writes_by_node``); the copies are of the written tensors only.
"""

from __future__ import annotations

import contextlib

import torch

from ..ir import Graph
from .state_writes import last_refusal, writes_by_node


class Transaction:
    """``method`` (a runtime Method) run so that a call that raises leaves the ``state``
    entries (names in ``slots``: ``name -> (table, key)``) and the ``inputs`` (positions of
    the graph's inputs) it may write as they were. Anything else is the method's own
    (``code``, ``graph``, ``check_guards``, ...)."""

    def __init__(self, method, state: list[str], inputs: list[int], slots: dict):
        self._method = method
        self._state = [slots[name] for name in state if name in slots]
        self._inputs = inputs

    def __getattr__(self, name: str):
        if name == "_method":
            raise AttributeError(name)
        return getattr(self._method, name)

    @property
    def check_guards(self) -> bool:
        return self._method.check_guards

    @check_guards.setter
    def check_guards(self, on: bool) -> None:
        self._method.check_guards = on

    def _written(self, args, kwargs) -> list[torch.Tensor]:
        tensors = [table[key] for table, key in self._state]
        if self._inputs:
            method = self._method
            if len(args) == method._direct_arity and not kwargs:
                leaves = list(args)
            else:
                try:
                    leaves = method._leaves(args, kwargs)
                except Exception:
                    leaves = []  # the method refuses these arguments before running
            tensors += [leaves[i] for i in self._inputs if i < len(leaves)]
        return [t for t in tensors if isinstance(t, torch.Tensor)]

    def __call__(self, *args, **kwargs):
        written = self._written(args, kwargs)
        with torch.no_grad():
            saved = [t.clone() for t in written]
        try:
            return self._method(*args, **kwargs)
        except BaseException:
            with torch.no_grad():
                for tensor, copy in zip(written, saved):
                    # one the call could not write either (an inference tensor): the
                    # call's own error is the one to see
                    with contextlib.suppress(RuntimeError):
                        tensor.copy_(copy)
            raise


def transactional(method, graph: Graph, slots: dict, methods: dict[str, Graph]):
    """``method`` as a :class:`Transaction` where its graph may write in place and be
    refused after it began; ``method`` itself otherwise (no cost)."""
    # Only what is written before the last node that may refuse can need putting back:
    # a cache written after its checks, copied on every call, cost 1,400 times the call.
    last = last_refusal(graph, methods)
    writes = [written for index, written in writes_by_node(graph, methods) if index <= last]
    if not writes:
        return method
    roots = frozenset().union(*writes)
    state = sorted(name for kind, name in roots if kind == "state")
    inputs = sorted(where for kind, where in roots if kind == "input")
    return Transaction(method, state, inputs, slots)
