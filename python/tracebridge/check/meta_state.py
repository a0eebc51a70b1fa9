"""A module traced on the meta device whose non-persistent buffers are meta too.

Why: a module traced on the meta device (a large model, traced without its weights) is
saved without tensor data and bound at load to a checkpoint (``load(path, weights=...)``).
A buffer registered with ``persistent=False`` -- a rotary embedding's ``inv_freq``,
position ids, a causal mask -- is computed by the module's ``__init__`` and left out of
``state_dict()``, so no checkpoint holds it; on the meta device it has no values either,
and nothing can compute them again (they come from Python code that ran once). The trace
is still right; what is missing is data. So the trace says so at once, naming the
buffers, with the two ways to supply them (artifact/weights.py repeats them at load).
"""

from __future__ import annotations

from ..errors import TracerWarning
from ..ir import Program
from ..source import warn_at_user_line


def state_read(program: Program) -> set[str]:
    """The state names some graph of ``program`` reads."""
    return {
        node.args[0]
        for graph in program.methods.values()
        for node in graph.nodes
        if node.op == "prim.state" and node.args
    }


def meta_non_persistent(program: Program) -> list[str]:
    """The non-persistent buffers of ``program`` that are on the meta device and that a
    graph reads (one that none reads is not needed at load: artifact/archive.py's
    ``unread_transient``)."""
    read = state_read(program)
    return [
        name
        for name, entry in program.state.items()
        if entry.kind == "buffer" and not entry.persistent and entry.tensor.is_meta and name in read
    ]


def warn_meta_non_persistent(program: Program) -> None:
    """Warn, naming them, where non-persistent buffers of a traced module are meta."""
    names = meta_non_persistent(program)
    if not names:
        return
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    owners = sorted({name.rpartition(".")[0] for name in names})
    owner = repr(owners[0]) if owners[0] else "the traced module itself"
    message = (
        f"non-persistent buffers on the meta device ({len(names)}): {shown}. The module "
        "computes them itself (register_buffer(..., persistent=False)) and leaves them out "
        "of state_dict(), so no checkpoint holds them, and a meta tensor has no values: "
        "the saved file will not load with weights= a checkpoint alone. Make them real "
        "before tracing, and the file holds their values: build the model on the meta "
        f"device, then put back the module that owns them built on the CPU (here "
        f"{owner}: for a Hugging Face Llama, model.model.rotary_emb = "
        "LlamaRotaryEmbedding(config=config)), or register the computed value "
        "(owner.register_buffer(name, value, persistent=False)). Or give their values at "
        "load: weights=[checkpoint, 'buffers.safetensors']"
    )
    warn_at_user_line(message, TracerWarning)  # at the user's call of trace()
