"""Published models traced for training: gradients, not only outputs, against eager.

``benchmarks/heldout.py`` runs models in evaluation mode and compares outputs; the cases
here only exist in training: transformers' gradient checkpointing (``use_reentrant=True``,
which is off in evaluation mode) and a speech model's CTC loss. Each model is traced once,
saved, reloaded in both runtimes, and called on other shapes; the outputs and every
parameter's gradient (None where eager gives none) must be eager's.

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/heldout_training.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision (transformers may import it)


class FirstOutput(nn.Module):
    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *tensors):
        return self.model(**dict(zip(self.names, tensors)), return_dict=False)[0]


def bert_reentrant_checkpointing() -> tuple[nn.Module, list[tuple]]:
    import transformers

    config = transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = transformers.BertModel(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    g = torch.Generator().manual_seed(1)
    calls = [(torch.randint(0, 50, shape, generator=g),) for shape in [(2, 7), (3, 9), (1, 4)]]
    return FirstOutput(model, ("input_ids",)).train(), calls


def wav2vec2_ctc_loss() -> tuple[nn.Module, list[tuple]]:
    import transformers

    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2, vocab_size=12, pad_token_id=0,
        do_stable_layer_norm=True, feat_extract_norm="layer", hidden_dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        layerdrop=0.0, mask_time_prob=0.0,
    )  # fmt: skip
    model = transformers.Wav2Vec2ForCTC(config)
    g = torch.Generator().manual_seed(2)
    calls = []
    for batch, samples, width in [(2, 1600, 5), (3, 2000, 7), (1, 1200, 3)]:
        labels = torch.randint(1, 12, (batch, width), generator=g)
        labels[0, -1] = -100  # padding, as transformers' collators pad labels
        calls.append((torch.randn(batch, samples, generator=g), labels))
    return FirstOutput(model, ("input_values", "labels")).train(), calls


CASES = {
    "bert (gradient checkpointing, use_reentrant=True)": bert_reentrant_checkpointing,
    "wav2vec2 (CTC loss)": wav2vec2_ctc_loss,
}


def gradients(fn: nn.Module, args: tuple) -> tuple[torch.Tensor, list]:
    for p in fn.parameters():
        p.grad = None
    torch.manual_seed(3)  # the same dropout draws as every other run
    out = fn(*args)
    out.float().square().sum().backward()
    return out.detach(), [None if p.grad is None else p.grad.clone() for p in fn.parameters()]


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def run(name: str, build) -> str:
    torch.manual_seed(0)
    model, calls = build()
    try:
        traced = tracebridge.trace(model, calls[0])
    except Exception as exc:  # noqa: BLE001 - reported, as the sweep reports refusals
        return f"refused at trace: {type(exc).__name__}: {str(exc)[:200]}"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.tb")
        traced.save(path)
        runs = {"in process": traced}
        for runtime in ("codegen", "interpreter"):
            runs[runtime] = tracebridge.load(path, runtime=runtime).train()
        right = 0
        for args in calls:
            want_out, want_grads = gradients(model, args)
            for fn in runs.values():
                got_out, got_grads = gradients(fn, args)
                ok = same(got_out, want_out) and len(got_grads) == len(want_grads)
                right += ok and all(same(a, b) for a, b in zip(got_grads, want_grads))
    total = len(calls) * len(runs)
    return f"{right}/{total} calls right (outputs and every gradient; in process and reloaded)"


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    for name, build in CASES.items():
        print(f"{name}: {run(name, build)}", flush=True)


if __name__ == "__main__":
    main()
