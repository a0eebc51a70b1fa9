"""Every optimizer step makes the values kept from the state be computed again.

Note: why a hook, and not the state's versions alone. The values a loaded or traced
program keeps from its state (folded batch norms, memos keyed on state: runtime/folding.py)
are checked against each source tensor's version and data pointer. The fused optimizers
(``AdamW(fused=True)``, ``SGD(fused=True)``, ``Adagrad(fused=True)``, asked for by many
training scripts) write the parameters in one kernel below autograd and move no version:
a model fine-tuned that way with its batch norms frozen, evaluated through its trace under
``torch.no_grad()`` after each epoch, served values folded before the steps (an outside
prober: eval loss 0.5353 where eager gave 0.0788), and so did older optimizers of one's own
that update ``p.data``. PyTorch calls one global hook after the step of every optimizer,
fused or not (``register_optimizer_step_post_hook``): it drops every kept value
(:func:`~tracebridge.invalidate_caches`), so the next call computes them from the state
as the step left it. An optimizer step costs one more Python call; a program's next call
recomputes what it keeps, as it does after any write it can see.
"""

from __future__ import annotations

from torch.optim.optimizer import register_optimizer_step_post_hook

from .folding import invalidate_caches

_HANDLES: list = []


def _after_step(optimizer, args, kwargs) -> None:
    invalidate_caches()


# R's Adam step in C (src/adam.c) runs only where no global hook would be skipped: this one
# it may skip, its in-place ops moving the versions the kept values are keyed on.
_after_step._tracebridge_own = True


def watch() -> None:
    """Install the hook (once per process)."""
    if not _HANDLES:
        _HANDLES.append(register_optimizer_step_post_hook(_after_step))


watch()
