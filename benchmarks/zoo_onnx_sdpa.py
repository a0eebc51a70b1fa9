"""Why the zoo's onnx column differs from eager on ModernBERT: a query row whose boolean
attention mask allows no key.

ModernBERT's local attention gives ``F.scaled_dot_product_attention`` a boolean mask; at a
padded position near the end of a padded row, the whole local window is padding, so the
mask allows no key for that query. PyTorch's kernel returns zeros for such a row.
``torch.onnx.export`` (dynamo) translates the call into ``Where(mask, 0, min) + Softmax``,
which for that row is a uniform softmax: the row gets the mean of the values. This script
shows it on one call, with no tracebridge in the path, and that every other row agrees:

    .venv/bin/python benchmarks/zoo_onnx_sdpa.py

It prints the eager row, the ONNX Runtime row, the mean of the values, and the largest
difference on the rows that allow some key.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def main() -> None:
    import onnxruntime

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 3, :] = False  # query 3 may attend to no key
    inputs = (q, k, v, mask)
    want = Attention()(*inputs)
    path = os.path.join(tempfile.mkdtemp(), "sdpa.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attention(), inputs, dynamo=True, verbose=False).save(path)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), inputs)}
    got = torch.from_numpy(session.run(None, feeds)[0])
    print(f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}")
    print("eager, the fully masked row:       ", want[0, 0, 3, :4].tolist())
    print("ONNX Runtime, the same row:        ", got[0, 0, 3, :4].tolist())
    print("mean of the values over every key: ", v[0, 0].mean(0)[:4].tolist())
    other = (got[..., :3, :] - want[..., :3, :]).abs().max().item()
    print(f"largest difference on the other rows: {other:.2e}")


if __name__ == "__main__":
    main()
