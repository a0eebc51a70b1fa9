"""The ``reference`` backend: "compiles" a partition into the one generated Python function
that runs its nodes, with no compiler. Results are those of the runtime, bit for bit, so it
tests partitioning, embedding and reloading anywhere (no C compiler, no GPU)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..ir import Node
from .base import Backend
from .opsets import STRUCTURAL, SUPPORTED, supported_by_set


class ReferenceBackend(Backend):
    """Same op set as ``inductor`` by default, so it predicts inductor's partition;
    ``--all-ops`` takes every op but state reads and guards."""

    name = "reference"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--all-ops", action="store_true", help="support every op, not only the inductor op set"
        )

    def supports(self, node: Node) -> bool:
        if self.args.all_ops:
            return node.op not in STRUCTURAL
        return supported_by_set(node, SUPPORTED)

    def compile(self, subgraph_fn: Callable, example_inputs, args, workdir) -> Callable:
        return subgraph_fn
