"""The op set: the closed list of operations a graph may name, each listed on purpose.

Note: allowed by design. Every op below is written here by name, in a family, because a
traced model needs it; nothing is taken from ``dir(torch)``. An op reads and makes tensors
and nothing else: no op exposes an address, a storage or raw memory (``*data_ptr*``,
``_from_blob``, ``*storage*``, ``set_``, ``_nested_view_from_buffer``, ``_copy_from``,
``resize_``; ``as_strided`` runs only within its input's own elements, checked before the
kernel, see ``runtime/checked_views.py``), none runs PyTorch's test hooks (``_test_*``), backend
internals (``mkldnn_*``, ``_foreach_*``) or changes global settings. ``empty``,
``empty_like`` and ``new_empty`` run as their zero-filled forms: their contents are
unspecified, and uninitialised memory would show a file what the process freed before
(``empty_strided`` too, its whole storage: ``runtime/checked_ops10.py``).
A private builtin (``_x``) is listed only in ``REVIEWED_PRIVATE``, with the reason.
``shared_ir/opset.md`` and ``shared_ir/ops.json`` are generated from this table.

Note: canonical names. An op is named by where it lives in PyTorch's public API:
``relu`` for ``torch.relu``, ``Tensor.view`` for a method with no ``torch.`` function,
``gelu`` for ``torch._C._nn.gelu`` (what ``F.gelu`` is), ``linalg.X``/``fft.X``/
``special.X``. A Tensor method folds into the function of the same name (``x.relu()`` and
``torch.relu(x)`` are both ``relu``) only when the two take the same positional arguments
(``FOLDED_METHODS``). Python composites (``F.relu``, ``F.batch_norm``) are not ops: the
tracer descends into them and records the builtins they call.

Each op has an :class:`OpInfo`: its meaning, flags as data (``inplace``, ``random``,
``variadic``, ``factory``), the function that runs it, and the kinds of its arguments
position by position and keyword by keyword (read from PyTorch's native schemas by
``ops_schema``, or written here for the ops that have none). A loader resolves names only
through :func:`impl_of`; it never calls ``getattr`` on a name read from a file.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from ..errors import TraceError
from . import ops_schema

# 3: prim.autograd_function (custom autograd functions). 4: integer enums declared and
# checked; native_batch_norm, _weight_norm, grid_sampler, _grouped_mm and the flat-weight
# RNN ops run through checked implementations; writes to parameters refused; byte limits
# (shared_ir/SPEC.md, section Versions). 5: _transformer_encoder_layer_fwd, and
# _native_multi_head_attention runs through a checked implementation. 6: torchvision.nms
# (torchvision's registered operator ``torchvision::nms``, run by torchvision's own kernel),
# packed sequences (_pack_padded_sequence, _pad_packed_sequence), short-time Fourier
# transforms (stft, istft) and broadcast_tensors, checked; _is_all_true, _is_any_true;
# and Tensor.floor_divide_ (what ``t //= n`` runs on a tensor). 7: ctc_loss, checked (its
# kernel reads log-probabilities by the target labels, unchecked);
# unique_dim (torch.unique along a dimension), linear algebra and
# statistics users call (cholesky_solve, linalg.lu_factor/lu_solve, linalg.eig, svd, cov,
# histogram, ...), embedding_renorm_ (nn.Embedding's max_norm), fake quantisation (with
# fused_moving_avg_obs_fake_quant, checked); nonzero, argwhere and the unique family now
# checked (bytes of data-chosen results). 8: the reads of a tensor's flags that code
# branches on (prim.is_inference, prim.is_leaf, prim.has_grad_fn, prim.is_neg,
# prim.is_conj, prim.is_contiguous_as), its storage offset (prim.storage_offset, a traced
# integer) and the caller's inference mode (prim.inference_mode): each was a constant of
# the trace before, and a call that differed was served silently; the caller's autocast
# as the code reads it (prim.autocast_enabled, prim.autocast_dtype). 9: the process-wide
# settings the code reads (prim.setting: torch.get_num_threads(), the float32 matmul
# precision, deterministic algorithms, torch.cuda.is_available()...), each a constant of
# the trace before; and whether a tensor is on a device type (prim.is_device_type:
# ``x.is_cuda``, ``x.device.type == "cpu"``), a constant of the trace before; math's float
# functions of traced numbers (scalar.sin, scalar.atan2, ...), baked before. 10: the
# dtypes uint16/32/64, the float8 dtypes and complex32 (ir/dtypes.py); everyday ops that
# torch.jit.trace recorded (the STFT windows, isin, fill_diagonal_, pdist, vander,
# gradient, put_, index_reduce_, empty_strided zero-filled, pad_sequence, the random
# log_normal_/cauchy_/geometric_). See SINCE.
OPSET_VERSION = 10

# --- the op set, by family ----------------------------------------------------------------
# Each name is a canonical name; see the module Note. Order inside a family is alphabetical.

FAMILIES: dict[str, str] = {
    "elementwise math": """
        abs absolute acos acosh angle asin asinh atan atan2 atanh ceil clamp clamp_max
        clamp_min clip copysign cos cosh deg2rad digamma erf erfc erfinv exp exp2 expm1
        fix float_power floor floor_divide fmax fmin fmod frac hypot i0 lerp lgamma log
        log10 log1p log2 logaddexp logaddexp2 logit maximum minimum nan_to_num neg negative
        nextafter polygamma positive pow rad2deg reciprocal remainder round rsqrt sgn sign
        signbit sin sinc sinh sqrt square tan tanh trunc xlogy
        add sub subtract mul multiply div divide true_divide rsub addcdiv addcmul
        special.erf special.erfc special.expit special.logit special.xlogy special.log1p
        special.sinc special.round special.i0 special.entr special.ndtr special.log_ndtr
        special.logsumexp special.softmax special.log_softmax
        special.erfcx
    """,
    "comparison and logic": """
        eq ne lt le gt ge greater greater_equal less less_equal not_equal equal isclose
        allclose isfinite isinf isnan isneginf isposinf isreal logical_and logical_not
        logical_or logical_xor bitwise_and bitwise_not bitwise_or bitwise_xor
        bitwise_left_shift bitwise_right_shift where heaviside
        isin
    """,
    "activations": """
        relu relu_ relu6 gelu silu silu_ mish mish_ hardswish hardswish_ hardsigmoid
        hardsigmoid_ hardtanh hardtanh_ elu elu_ selu selu_
        celu leaky_relu leaky_relu_ prelu rrelu softplus softshrink hardshrink threshold
        threshold_ glu log_sigmoid sigmoid sigmoid_ tanh_ softmax log_softmax
    """,
    "normalization": """
        batch_norm layer_norm group_norm instance_norm rms_norm native_layer_norm
        native_batch_norm
    """,
    "linear algebra": """
        linear bilinear matmul mm bmm mv dot vdot inner outer addmm addmv addbmm baddbmm
        einsum kron tensordot trace tril triu diag diag_embed diagonal det logdet slogdet
        inverse pinverse matrix_exp matrix_power cross cdist
        linalg.norm linalg.vector_norm linalg.matrix_norm linalg.inv linalg.det
        linalg.slogdet linalg.solve linalg.cholesky linalg.qr linalg.svd linalg.svdvals
        linalg.eigh linalg.eigvalsh linalg.pinv linalg.matrix_exp linalg.cross
        linalg.vecdot linalg.lstsq linalg.matrix_rank
        cholesky cholesky_solve cholesky_inverse triangular_solve lu_unpack geqrf ormqr svd
        diagflat addr
        linalg.cholesky_ex linalg.solve_triangular linalg.lu_factor linalg.lu_factor_ex
        linalg.lu_solve linalg.lu linalg.matrix_power linalg.cond linalg.eig linalg.eigvals
        linalg.multi_dot linalg.tensorinv linalg.tensorsolve linalg.vander linalg.solve_ex
        linalg.inv_ex linalg.householder_product linalg.matmul
        trapezoid trapz cumulative_trapezoid cov corrcoef histogram
        pdist vander
    """,
    "convolution and pooling": """
        conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution
        im2col col2im max_pool1d max_pool2d max_pool3d max_pool2d_with_indices
        max_pool3d_with_indices max_pool1d_with_indices avg_pool1d avg_pool2d avg_pool3d
        adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
        adaptive_max_pool2d adaptive_max_pool3d max_unpool2d max_unpool3d
        pixel_shuffle pixel_unshuffle channel_shuffle
    """,
    "resampling and padding": """
        upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_linear1d
        upsample_bilinear2d upsample_bicubic2d upsample_trilinear3d grid_sampler
        affine_grid_generator pad constant_pad_nd reflection_pad1d reflection_pad2d
        reflection_pad3d replication_pad1d replication_pad2d replication_pad3d
    """,
    "attention, embedding, recurrent": """
        scaled_dot_product_attention embedding embedding_bag one_hot lstm gru rnn_tanh
        rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _pack_padded_sequence
        _pad_packed_sequence
        embedding_renorm_ pad_sequence
    """,
    "dropout and random": """
        dropout dropout_ alpha_dropout feature_dropout feature_alpha_dropout bernoulli
        multinomial normal poisson rand randn randint randperm rand_like randn_like
        randint_like Tensor.uniform_ Tensor.normal_ Tensor.bernoulli_ Tensor.random_
        Tensor.exponential_ Tensor.log_normal_ Tensor.cauchy_ Tensor.geometric_
    """,
    "losses": """
        cross_entropy_loss nll_loss nll_loss2d nll_loss_nd mse_loss l1_loss smooth_l1_loss
        ctc_loss
        huber_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div
        soft_margin_loss cosine_similarity pairwise_distance cosine_embedding_loss
        margin_ranking_loss hinge_embedding_loss triplet_margin_loss poisson_nll_loss
    """,
    "reductions and scans": """
        sum mean prod max min amax amin aminmax argmax argmin std var std_mean var_mean
        norm logsumexp all any cumsum cumprod cummax cummin logcumsumexp median nanmedian
        mode sort argsort msort topk kthvalue count_nonzero nansum nanmean quantile
        nanquantile unique_consecutive histc bincount bucketize searchsorted dist renorm
        diff
        unique_dim gradient
    """,
    "shape and layout": """
        Tensor.view Tensor.view_as Tensor.reshape Tensor.reshape_as reshape flatten
        Tensor.unflatten unflatten squeeze unsqueeze Tensor.permute permute transpose
        swapaxes swapdims movedim moveaxis t Tensor.contiguous Tensor.expand Tensor.expand_as
        Tensor.repeat tile broadcast_to broadcast_tensors cat concat concatenate stack hstack
        vstack dstack
        column_stack split split_with_sizes chunk unbind tensor_split hsplit vsplit dsplit
        narrow narrow_copy select flip fliplr flipud roll rot90 atleast_1d atleast_2d
        atleast_3d ravel Tensor.unfold meshgrid cartesian_prod combinations block_diag
        view_as_real view_as_complex real imag Tensor.T Tensor.mT Tensor.H Tensor.mH
        Tensor.real Tensor.imag Tensor.data
        repeat_interleave as_strided
    """,
    "indexing and scattering": """
        getitem setitem gather scatter scatter_add scatter_reduce index_select index_add
        index_copy index_fill index_put masked_fill masked_scatter masked_select take
        take_along_dim nonzero argwhere select_scatter slice_scatter diagonal_scatter
        Tensor.masked_fill_ Tensor.index_put_ Tensor.scatter_ Tensor.scatter_add_
        Tensor.index_add_ Tensor.index_fill_ Tensor.index_copy_ Tensor.masked_scatter_
        put Tensor.put_ index_reduce Tensor.index_reduce_ Tensor.fill_diagonal_
    """,
    "conversion and copies": """
        clone Tensor.to Tensor.type Tensor.type_as Tensor.float Tensor.double Tensor.half
        Tensor.bfloat16 Tensor.long Tensor.int Tensor.short Tensor.char Tensor.byte
        Tensor.bool Tensor.cfloat Tensor.cdouble Tensor.cpu detach Tensor.detach_
        Tensor.requires_grad_ Tensor.copy_ Tensor.fill_ Tensor.zero_ complex polar
    """,
    "creation": """
        zeros ones full empty zeros_like ones_like full_like empty_like arange linspace
        logspace eye tensor as_tensor scalar_tensor tril_indices triu_indices
        Tensor.new_zeros Tensor.new_ones Tensor.new_full Tensor.new_empty Tensor.new_tensor
        fft.fft fft.ifft fft.rfft fft.irfft fft.fft2 fft.ifft2 fft.rfft2 fft.irfft2 fft.fftn
        fft.ifftn fft.rfftn fft.irfftn fft.fftshift fft.ifftshift fft.fftfreq fft.rfftfreq
        fft.hfft fft.ihfft stft istft
        hann_window hamming_window blackman_window bartlett_window kaiser_window empty_strided
    """,
    "in-place arithmetic": """
        Tensor.add_ Tensor.sub_ Tensor.mul_ Tensor.div_ Tensor.pow_ Tensor.neg_
        Tensor.abs_ Tensor.exp_ Tensor.log_ Tensor.sqrt_ Tensor.rsqrt_ Tensor.clamp_
        Tensor.clamp_min_ Tensor.clamp_max_ Tensor.addcmul_ Tensor.addcdiv_ Tensor.lerp_
        Tensor.floor_ Tensor.ceil_ Tensor.round_ Tensor.trunc_ Tensor.tanh_ Tensor.sigmoid_
        Tensor.relu_ Tensor.bitwise_and_ Tensor.bitwise_or_ Tensor.bitwise_xor_
        Tensor.bitwise_not_ Tensor.logical_and_ Tensor.logical_or_ Tensor.logical_not_
        Tensor.fmod_ Tensor.remainder_ Tensor.floor_divide_ Tensor.tril_ Tensor.triu_
        Tensor.squeeze_
        Tensor.unsqueeze_ Tensor.t_ Tensor.transpose_
    """,
    # Only the reflected dunders that are builtins: the others (__rsub__, __rpow__, ...) are
    # Python functions on torch.Tensor that the tracer descends into, so ``1 - y`` records
    # ``rsub`` as the code it runs says, and backends see the plain op.
    "reflected operators": """
        Tensor.__rand__ Tensor.__ror__ Tensor.__rxor__
        Tensor.__ilshift__ Tensor.__irshift__ Tensor.__imod__ Tensor.__ifloordiv__
    """,
    # op-set 7: quantisation-aware training (float in, float out; no quantized tensors)
    "fake quantisation": """
        fake_quantize_per_tensor_affine fake_quantize_per_channel_affine
        fused_moving_avg_obs_fake_quant
    """,
    "autograd mode": """
        set_grad_enabled
    """,
    # Operators that a library registers with PyTorch (``torch.ops.NAMESPACE.NAME``), named
    # ``NAMESPACE.NAME``; see ``REGISTERED_OPERATORS``.
    "detection (torchvision)": """
        torchvision.nms
    """,
}

# Private builtins, each reviewed: what it is and why a graph needs it.
REVIEWED_PRIVATE: dict[str, str] = {
    "_upsample_nearest_exact1d": "F.interpolate(mode='nearest-exact') calls it; a pure "
    "resampling of its input tensor",
    "_upsample_nearest_exact2d": "as _upsample_nearest_exact1d, for 2-d images",
    "_upsample_nearest_exact3d": "as _upsample_nearest_exact1d, for volumes",
    "_upsample_bilinear2d_aa": "F.interpolate(antialias=True) calls it; pure resampling",
    "_upsample_bicubic2d_aa": "F.interpolate(antialias=True) calls it; pure resampling",
    "_native_multi_head_attention": "nn.MultiheadAttention's inference fast path calls "
    "it; reads only its tensor arguments; runs through a checked implementation (num_head "
    "at least 1, proj_bias one element per feature)",
    "_unique2": "torch.unique calls it; returns new tensors from its input",
    "_pad_circular": "F.pad(mode='circular') calls it; pure copy of its input; runs through a "
    "checked implementation (a pad may not wrap past what negative pads keep)",
    "_weight_norm": "nn.utils.weight_norm's parametrisation (wav2vec2, HuBERT) calls it; "
    "v * g / norm(v), new tensor from its inputs; runs through a checked implementation "
    "(g's shape against v and dim)",
    "_grouped_mm": "mixture-of-experts layers (Mixtral, Qwen2-MoE in transformers) call it; "
    "grouped matrix products of its tensor arguments; runs through a checked implementation "
    "(PyTorch's CPU kernel does not check the offsets)",
    "_shape_as_tensor": "torchvision's detection heads call it while tracing; a new int64 "
    "tensor holding its input's sizes (no data read)",
    "_is_all_true": "torch.distributions' argument validation calls it; whether every "
    "element of a bool tensor is true, as a 0-d bool tensor",
    "_is_any_true": "as _is_all_true: whether any element of a bool tensor is true",
    "_pack_padded_sequence": "nn.utils.rnn.pack_padded_sequence calls it; the rows of its "
    "input that the lengths keep, and the batch size at each step; runs through a checked "
    "implementation (lengths a CPU int64 vector, one per sequence, sorted, within the steps)",
    "_pad_packed_sequence": "nn.utils.rnn.pad_packed_sequence calls it; the packed rows back "
    "in a zero-padded (or padding_value) tensor; runs through a checked implementation "
    "(batch_sizes as a packed sequence has them, total_length at least the steps, bytes)",
    "_transformer_encoder_layer_fwd": "nn.TransformerEncoderLayer's inference fast path calls "
    "it; new tensor from its tensor arguments; runs through a checked implementation "
    "(num_heads at least 1, the biases one element per output feature)",
}

# Tensor methods that behave exactly like the torch function of the same name; where the
# method also takes sizes or dims as varargs (``x.flip(0, 1)``), the tracer records them as
# the function's one list (trace/dispatch.py, ``_packed_varargs``).
FOLDED_METHODS = frozenset(
    """
abs absolute acos add addbmm addcdiv addcmul addmm addmv all allclose amax amin aminmax any
argmax argmin argsort as_strided asin atan atan2 baddbmm bitwise_and bitwise_not bitwise_or
bitwise_xor bmm broadcast_to ceil chunk clamp clamp_max clamp_min clip clone cos cosh count_nonzero
cross cummax cummin cumprod cumsum deg2rad det detach diag diag_embed diagonal diff digamma
flatten flip dist div divide dot eq equal erf erfc erfinv exp exp2 expm1 fix float_power floor
floor_divide fmax fmin fmod frac gather gcd ge greater greater_equal gt hardshrink
heaviside histc hypot i0 index_add index_copy index_fill index_put index_select inner
inverse isclose isfinite isinf isnan isneginf isposinf isreal kron kthvalue lcm ldexp le
lerp less less_equal lgamma log log10 log1p log2 log_softmax logaddexp logaddexp2
logcumsumexp logdet logical_and logical_not logical_or logical_xor logit logsumexp lt
masked_fill masked_scatter masked_select matmul matrix_exp matrix_power max maximum mean
median min minimum mm mode moveaxis movedim msort mul multiply mv mvlgamma nan_to_num
nanmean nanmedian nanquantile nansum narrow narrow_copy ne neg negative nextafter nonzero
not_equal numel outer pinverse polygamma positive pow prod qr quantile rad2deg
reciprocal relu remainder renorm repeat_interleave roll rot90 round rsqrt scatter
scatter_add scatter_reduce select select_scatter sgn sigmoid sign signbit sin sinc sinh
slice_scatter slogdet softmax sort split split_with_sizes sqrt square squeeze std sub
subtract sum svd swapaxes swapdims t take take_along_dim tan tanh tensor_split topk trace
transpose trapz tril triu true_divide trunc unbind unique_consecutive unsqueeze var vdot
xlogy
""".split()
) | frozenset(
    # op-set 7: methods of the linear algebra and statistics added then
    "cholesky cholesky_solve cholesky_inverse triangular_solve geqrf ormqr diagflat addr "
    "histogram cov corrcoef".split()
)
# Methods whose function was in the op set while the method spelling was refused
# (``x.tile(2)`` in DINOv3's rotary table; the held-out sweep's ninth round): each takes its
# tensor first and the function's other arguments in the function's order. Not ``where``
# (``x.where(c, y)`` is ``torch.where(c, x, y)``: another order) and not the private
# ``_is_all_true`` / ``_is_any_true``.
FOLDED_METHODS |= frozenset(
    "acosh asinh atanh angle copysign bitwise_left_shift bitwise_right_shift prelu bernoulli "
    "multinomial bincount tile hsplit vsplit dsplit fliplr flipud ravel argwhere "
    "diagonal_scatter".split()
) | frozenset(
    # op-set 10: ``x.put(i, v)`` and ``x.index_reduce(d, i, v, r)`` take the function's order
    "put index_reduce".split()
)

# The op-set version each op appeared in, for the ops added after version 3 (ONNX's
# "since version"); ops.json carries it as ``since`` on those rows.
SINCE: dict[str, int] = {
    "as_strided": 4,
    "repeat_interleave": 4,
    "_transformer_encoder_layer_fwd": 5,
    "torchvision.nms": 6,
    "_pack_padded_sequence": 6,
    "_pad_packed_sequence": 6,
    "stft": 6,
    "istft": 6,
    "broadcast_tensors": 6,
    "_is_all_true": 6,
    "_is_any_true": 6,
    "Tensor.floor_divide_": 6,
    "ctc_loss": 7,
    # op-set 7, ops branch: data-chosen results, linear algebra, quantisation, embeddings
    "unique_dim": 7,
    # op-set 8: tensor flags and the storage offset, read at call time and guarded
    **dict.fromkeys(
        "prim.storage_offset prim.is_inference prim.is_leaf prim.has_grad_fn prim.is_neg "
        "prim.is_conj prim.is_contiguous_as prim.inference_mode prim.autocast_enabled "
        "prim.autocast_dtype".split(),
        8,
    ),
    # op-set 9: the process-wide settings the code reads, at call time and guarded
    "prim.setting": 9,
    # op-set 10: everyday ops torch.jit.trace recorded and the op set lacked (prober20b F8)
    **dict.fromkeys(
        "hann_window hamming_window blackman_window bartlett_window kaiser_window "
        "empty_strided vander pdist gradient isin special.erfcx put Tensor.put_ index_reduce "
        "Tensor.index_reduce_ Tensor.fill_diagonal_ Tensor.log_normal_ Tensor.cauchy_ "
        "Tensor.geometric_ pad_sequence".split(),
        10,
    ),
    # op-set 9: a tensor's device type as the code inspects it, at call time and guarded
    "prim.is_device_type": 9,
    **dict.fromkeys(
        """
cholesky cholesky_solve cholesky_inverse triangular_solve lu_unpack geqrf ormqr svd diagflat
addr linalg.cholesky_ex
linalg.solve_triangular linalg.lu_factor linalg.lu_factor_ex linalg.lu_solve linalg.lu
linalg.matrix_power linalg.cond linalg.eig linalg.eigvals linalg.multi_dot linalg.tensorinv
linalg.tensorsolve linalg.vander linalg.solve_ex linalg.inv_ex linalg.householder_product
linalg.matmul trapezoid trapz cumulative_trapezoid cov corrcoef histogram embedding_renorm_
fake_quantize_per_tensor_affine fake_quantize_per_channel_affine fused_moving_avg_obs_fake_quant
""".split(),
        7,
    ),
}

# Note: operators a library registers. ``torch.ops.torchvision.nms`` exists only once
# torchvision is imported (its C++ library registers it), so it is not looked up when this
# table is built: the tracer knows it by its qualified name (``torchvision::nms``) when it
# sees the call, and a runtime binds torchvision's kernel when it loads a graph that names
# it (``runtime/torchvision_ops.py``: checked arguments, and a clear error where torchvision
# cannot be imported). There is no pure-PyTorch stand-in: which of two boxes with equal
# scores survives depends on the sort torchvision's kernel uses (unstable before 0.12,
# stable since), and its CUDA kernel rounds the overlap differently from its CPU kernel, so
# no one function is torchvision's result everywhere.
REGISTERED_OPERATORS: dict[str, str] = {"torchvision::nms": "torchvision.nms"}
_REGISTERED_MEANINGS = {
    "torchvision::nms": "Non-maximum suppression (torchvision.ops.nms): the int64 indices of "
    "the boxes kept, by decreasing score",
}

# Operator dunders and the op each is (reflected forms only where the value is the same).
DUNDER_OPS = {
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "Tensor.add_",
    "__sub__": "sub",
    "__isub__": "Tensor.sub_",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__imul__": "Tensor.mul_",
    "__truediv__": "div",
    "__itruediv__": "Tensor.div_",
    "__div__": "div",
    "__matmul__": "matmul",
    "__neg__": "neg",
    "__abs__": "abs",
    "__pow__": "pow",
    "__ipow__": "Tensor.pow_",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "__xor__": "bitwise_xor",
    "__iand__": "Tensor.bitwise_and_",
    "__ior__": "Tensor.bitwise_or_",
    "__ixor__": "Tensor.bitwise_xor_",
    "__invert__": "bitwise_not",
    "__eq__": "eq",
    "__ne__": "ne",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__mod__": "remainder",
    "__floordiv__": "floor_divide",
    "__lshift__": "bitwise_left_shift",
    "__rshift__": "bitwise_right_shift",
    "__getitem__": "getitem",
    "__setitem__": "setitem",
}

# The tracer turns these into Python values itself (sizes, guards, provenance).
SPECIAL = frozenset(
    """
size dim ndimension numel nelement stride storage_offset element_size is_contiguous
is_floating_point is_complex is_signed is_set_to is_same_size is_nonzero has_names
get_device item tolist numpy __bool__ __int__ __float__ __index__ __complex__ __len__
__iter__ __contains__ __reversed__ __repr__ __format__ __hash__ is_inference
is_conj is_neg nbytes itemsize
""".split()
)

# Tensor properties read through a getter; each maps to how the tracer treats it.
TENSOR_OP_PROPERTIES = ("T", "mT", "H", "mH", "real", "imag", "data")
TENSOR_META_PROPERTIES = (
    "requires_grad", "is_leaf", "is_cuda", "is_cpu", "is_sparse", "is_quantized", "is_meta",
    "is_mkldnn", "is_nested", "layout", "ndim", "names", "grad_fn", "is_mps", "is_xpu",
    "output_nr", "_version", "retains_grad", "is_sparse_csr", "itemsize", "nbytes", "_base",
    "is_ipu", "is_xla", "is_vulkan", "is_maia", "is_mtia",
)  # fmt: skip

# Ops whose number of outputs depends on the input's shape: the runtime checks the count.
VARIADIC_OUTPUTS = frozenset(
    "unbind split split_with_sizes chunk tensor_split hsplit vsplit dsplit "
    "unique_consecutive meshgrid atleast_1d atleast_2d atleast_3d gradient".split()
)

# Ops that draw random numbers only where an argument asks: (position, keyword) of the
# probability that is literally 0 where they draw none (attention's dropout: ``dropout_p``).
RANDOM_WHEN = {"scaled_dot_product_attention": (4, "dropout_p")}


def draws_random(node) -> bool:
    """Whether a graph node may draw from the random number generator: an op of
    :data:`RANDOM_OPS`, or one of :data:`RANDOM_WHEN` whose probability is not a literal
    0 (``scaled_dot_product_attention(q, k, v, dropout_p=0.1)`` draws its dropout mask,
    so two such calls are not one, and a run of it cannot be repeated).

    >>> from tracebridge.ir import Node
    >>> draws_random(Node("scaled_dot_product_attention", [None] * 3, {"dropout_p": 0.5}))
    True
    """
    if node.op in RANDOM_OPS:
        return True
    where = RANDOM_WHEN.get(node.op)
    if where is None:
        return False
    position, keyword = where
    if keyword in node.kwargs:
        p = node.kwargs[keyword]
    else:
        p = node.args[position] if len(node.args) > position else 0.0
    return not (type(p) in (int, float) and p == 0)


# Ops whose result depends on the random number generator.
RANDOM_OPS = frozenset(
    """
rand randn randint randperm rand_like randn_like randint_like bernoulli multinomial normal
poisson dropout dropout_ alpha_dropout feature_dropout feature_alpha_dropout rrelu
Tensor.uniform_ Tensor.normal_ Tensor.bernoulli_ Tensor.random_ Tensor.exponential_
Tensor.log_normal_ Tensor.cauchy_ Tensor.geometric_
""".split()
)

# Ops that make a tensor whose size is given by arguments: their size arguments are
# bounded by the checker (a literal may not ask for more than ``MAX_LITERAL_NUMEL``).
SIZE_ARGUMENTS = frozenset(
    "size sizes shape repeats dims output_size steps end n m num_classes minlength row col "
    "pad bins num_samples window_length".split()
)
# Ops whose size arguments multiply: ``eye(n, m)`` makes n * m elements, ``tril_indices(row,
# col)`` about 2 * row * col; the checker bounds the product, not each alone.
SIZE_PRODUCTS = frozenset("eye tril_indices triu_indices".split())
# Ops whose size is the length of a range, ``ceil((end - start) / step)``: with literal
# numbers the checker bounds that length (``end`` alone says nothing of a tiny step).
SIZE_RANGES = frozenset({"arange"})

# Integer arguments that are enums, by parameter name: a file may write only these values
# (checked at load; the checked implementations check them again at the call). PyTorch's
# kernels index tables or switch on them, and ``grid_sampler`` with a mode out of range
# returned memory it never wrote. ``mode`` is an enum only for ``embedding_bag``.
ENUM_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "interpolation_mode": (0, 1, 2),  # bilinear, nearest, bicubic
    "padding_mode": (0, 1, 2),  # zeros, border, reflection
    "reduction": (0, 1, 2),  # none, mean, sum
    "mask_type": (0, 1, 2),  # src_mask, src_key_padding_mask, both
    "compute_mode": (0, 1, 2),  # cdist: mm when possible, always mm, never mm
}
_ENUM_OPS: dict[str, dict[str, tuple[int, ...]]] = {"embedding_bag": {"mode": (0, 1, 2)}}

# Ops that run through a checked implementation (runtime/checked_ops.py): their PyTorch
# kernel trusts an argument a file controls (a shape relation, an enum, an offset), or the
# size of their result comes from values or from a product of sizes. The runtime checks
# the arguments, and the bytes, before the kernel runs (flag ``checked`` in ops.json).
CHECKED_OPS = (
    frozenset(
        """
native_batch_norm _weight_norm group_norm grid_sampler _grouped_mm gru lstm rnn_tanh
rnn_relu
embedding_bag bincount one_hot outer kron cartesian_prod diag_embed combinations
tensor_split hsplit vsplit dsplit chunk _pad_circular pad
_native_multi_head_attention _transformer_encoder_layer_fwd torchvision.nms
_pack_padded_sequence _pad_packed_sequence stft istft broadcast_tensors ctc_loss
""".split()
    )
    | frozenset(
        # op-set 7, ops branch (runtime/checked_ops7.py)
        """
nonzero argwhere _unique2 unique_dim unique_consecutive linalg.vander histogram cov corrcoef
linalg.multi_dot embedding_renorm_ fused_moving_avg_obs_fake_quant diagflat addr lu_unpack
linalg.eigvals linalg.lu svd linalg.svd linalg.qr cholesky_solve triangular_solve
linalg.solve_triangular linalg.lu_solve linalg.lstsq linalg.solve linalg.solve_ex trapezoid trapz
cumulative_trapezoid masked_select unbind split
""".split()
    )
    | frozenset(
        # op-set 10 (runtime/checked_ops10.py): results sized by products of sizes or by
        # strides (empty_strided's storage)
        "vander pdist pad_sequence empty_strided".split()
    )
    | frozenset(
        # index values checked before the kernel where it would check them on the device
        # (a device-side assert): runtime/checked_indices.py
        """
gather scatter scatter_add scatter_reduce Tensor.scatter_ Tensor.scatter_add_ index_select
index_add Tensor.index_add_ index_copy Tensor.index_copy_ index_reduce Tensor.index_reduce_
index_fill Tensor.index_fill_ take put Tensor.put_ take_along_dim embedding getitem setitem
index_put Tensor.index_put_ nll_loss nll_loss2d nll_loss_nd cross_entropy_loss max_unpool2d
max_unpool3d searchsorted masked_scatter Tensor.masked_scatter_
""".split()
    )
    | frozenset(
        # torch 2.11's reflection_pad3d reads its six pads before counting them
        "reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d "
        "replication_pad3d".split()
    )
)

# The zero-filled forms of the uninitialised factories (see the module Note).
_SAFE_IMPLS: dict[str, Callable] = {
    "empty": torch.zeros,
    "empty_like": torch.zeros_like,
    "Tensor.new_empty": torch.Tensor.new_zeros,
}

# The structural ops, with their meaning.
PRIM_OPS = {
    "prim.state": "read a parameter, buffer or constant of the program by name",
    "prim.guard": "check that a value equals what the trace saw, else raise GuardError",
    "prim.size": "the size of a tensor along a dimension (a traced integer)",
    "prim.numel": "the number of elements of a tensor (a traced integer)",
    "prim.dtype": "the dtype of a tensor",
    "prim.device": "the device of a tensor",
    "prim.tolist": "a tensor as nested Python numbers",
    "prim.item": "the one element of a tensor as a Python number",
    "prim.bool": "a tensor or scalar turned into a Python bool",
    "prim.int": "a tensor or scalar turned into a Python int",
    "prim.float": "a tensor or scalar turned into a Python float",
    "prim.len": "the length of a sequence",
    "prim.stride": "the stride of a tensor along a dimension (a traced integer)",
    "prim.requires_grad": "whether a tensor requires grad",
    "prim.is_contiguous": "whether a tensor is contiguous in memory",
    "prim.grad_enabled": "whether autograd is on for this call (the caller's mode)",
    "prim.storage_offset": "a tensor's offset in its storage, in elements (a traced integer)",
    "prim.is_contiguous_as": "whether a tensor is contiguous in a memory format",
    "prim.is_inference": "whether a tensor is an inference tensor (made in inference mode)",
    "prim.is_leaf": "whether a tensor is a leaf of the autograd graph",
    "prim.has_grad_fn": "whether a tensor has a grad_fn (was made by an op autograd recorded)",
    "prim.is_neg": "whether a tensor's negative bit is set (a lazy negation view)",
    "prim.is_conj": "whether a tensor's conjugate bit is set (a lazy conjugate view)",
    "prim.inference_mode": "whether inference mode is on for this call (the caller's mode)",
    "prim.autocast_enabled": "whether the caller's autocast is on for a device type",
    "prim.autocast_dtype": "the dtype of the caller's autocast for a device type",
    "prim.setting": "a process-wide setting of torch, by name (one of SETTINGS)",
    "prim.is_device_type": "whether a tensor is on a device of a type (one of DEVICE_TYPES)",
    "prim.autograd_function": (
        "a custom torch.autograd.Function: runs graph `forward` on the tensors, and graph "
        "`backward` on its `saved` values and the output gradients when autograd asks"
    ),
}
# Argument kinds of the structural ops.
_PRIM_ARGS: dict[str, tuple] = {
    "prim.state": (("str",),),
    "prim.guard": (("any",),),
    "prim.size": (("tensor",), ("dim",)),
    "prim.numel": (("tensor",),),
    "prim.dtype": (("tensor",),),
    "prim.device": (("tensor",),),
    "prim.tolist": (("tensor",),),
    "prim.item": (("tensor",),),
    "prim.bool": (("tensor", "scalar"),),
    "prim.int": (("tensor", "scalar"),),
    "prim.float": (("tensor", "scalar"),),
    "prim.len": (("tensor", "list"),),
    "prim.stride": (("tensor",), ("dim",)),
    "prim.requires_grad": (("tensor",),),
    "prim.is_contiguous": (("tensor",),),
    "prim.grad_enabled": (),
    "prim.storage_offset": (("tensor",),),
    "prim.is_contiguous_as": (("tensor",), ("memory_format",)),
    "prim.is_inference": (("tensor",),),
    "prim.is_leaf": (("tensor",),),
    "prim.has_grad_fn": (("tensor",),),
    "prim.is_neg": (("tensor",),),
    "prim.is_conj": (("tensor",),),
    "prim.inference_mode": (),
    "prim.autocast_enabled": (("str",),),
    "prim.autocast_dtype": (("str",),),
    "prim.setting": (("str",),),
    "prim.is_device_type": (("tensor",), ("str",)),
    "prim.autograd_function": (("tensors",),),
}
_PRIM_KWARGS: dict[str, dict] = {
    "prim.guard": {"expect": ("any",), "what": ("str",), "kind": ("str",)},
    "prim.autograd_function": {
        "forward": ("str",),
        "backward": ("str",),
        "saved": ("int",),
        "function": ("str",),
        "non_differentiable": ("ints",),
    },
}
GUARD_KINDS = ("value", "branch", "loop", "count")
# Reads of a tensor's flags (op-set 8 and prim.requires_grad): they keep nothing of it.
TENSOR_FLAG_READS = frozenset(
    "prim.requires_grad prim.is_inference prim.is_leaf prim.has_grad_fn prim.is_neg "
    "prim.is_conj prim.is_device_type".split()
)
# Structural reads whose answer neither an argument's value nor a version holds: the
# caller's modes and a tensor's flags (they change without a new version). The runtime
# never folds, merges or keys them (runtime/folding.py, cse.py, size_checks.py).
DYNAMIC_READS = TENSOR_FLAG_READS | frozenset(
    "prim.grad_enabled prim.inference_mode prim.autocast_enabled prim.autocast_dtype "
    "prim.setting".split()
)
# The settings prim.setting reads, name -> the kind of its value (a file naming another is
# refused at load). The float32 matmul precision is read as its position in
# MATMUL_PRECISIONS, an integer, as a graph has no string values.
SETTINGS = {
    "num_threads": "int",
    "num_interop_threads": "int",
    "float32_matmul_precision": "int",
    "deterministic_algorithms": "bool",
    "deterministic_algorithms_warn_only": "bool",
    "cuda_available": "bool",
    "distributed_initialized": "bool",
    "anomaly_enabled": "bool",
    "anomaly_check_nan": "bool",
    # torch.get_default_dtype(), as its position in DEFAULT_DTYPES; a factory given no dtype
    # follows it by itself (runtime/codegen.py), code that passes or compares it reads it
    "default_dtype": "int",
    # the backends a kernel may take, where code branches on them itself
    "cudnn_enabled": "bool",
    "cudnn_allow_tf32": "bool",
    "cudnn_deterministic": "bool",
    "cudnn_benchmark": "bool",
    "mkldnn_enabled": "bool",
    "cublas_allow_tf32": "bool",
    "cublas_allow_fp16_reduced_precision": "bool",
    "cublas_allow_bf16_reduced_precision": "bool",
    "math_sdp_enabled": "bool",
    "flash_sdp_enabled": "bool",
    "mem_efficient_sdp_enabled": "bool",
    "cudnn_sdp_enabled": "bool",
    # torch.get_default_device(): its type as a position in DEVICE_TYPES, its index (-1: none)
    "default_device_type": "int",
    "default_device_index": "int",
    "mha_fastpath_enabled": "bool",
    "opt_einsum_enabled": "bool",
    # torch.backends.opt_einsum.strategy, as its position in OPT_EINSUM_STRATEGIES
    "opt_einsum_strategy": "int",
    "warn_always": "bool",
}
MATMUL_PRECISIONS = ("highest", "high", "medium")
# The dtypes torch.set_default_dtype takes, by position (prim.setting "default_dtype").
DEFAULT_DTYPES = ("float32", "float64", "float16", "bfloat16")
# opt_einsum's strategies, by position (prim.setting "opt_einsum_strategy"); "none": the
# strategy torch gives where opt_einsum is not installed (None)
OPT_EINSUM_STRATEGIES = ("none", "auto", "greedy", "optimal")
# The device types prim.is_device_type compares with (a file naming another is refused):
# those a tensor has an ``is_*`` flag for (``x.is_cuda``), and the other types of torch.
DEVICE_TYPES = tuple(
    "cpu cuda mps xpu meta ipu maia mtia vulkan xla hpu hip lazy privateuseone".split()
)
# The device types whose autocast state torch keeps: the argument of prim.autocast_enabled
# and prim.autocast_dtype is one of them (a file naming another is refused).
AUTOCAST_DEVICE_TYPES = tuple("cpu cuda xpu mps hpu xla ipu mtia maia privateuseone".split())
# The reads that take one of them (checked at load: check/program.py).
AUTOCAST_READS = frozenset({"prim.autocast_enabled", "prim.autocast_dtype"})

# --- bounded Python arithmetic on traced numbers --------------------------------------------
# Note: a traced number is a size or an element read with .item(); none is ever outside
# int64. Python ints grow without bound, so ``7 ** 10**9`` or ``1 << 10**9`` would run for
# minutes and take gigabytes; these functions refuse such a result before computing it.

INT_MIN, INT_MAX = -(2**63), 2**64 - 1


class ScalarRangeError(TraceError):
    """A scalar op would make an integer outside the range of traced numbers."""


def _check_int(value, op: str):
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        raise ScalarRangeError(
            f"scalar.{op} gives an integer outside [-2**63, 2**64 - 1] for these inputs: "
            "integer arithmetic on traced numbers (sizes, elements) is bounded to 64 bits, "
            "so that a graph cannot compute an integer of gigabytes. Where the traced code "
            "means this (a power of a size used as a float, say), make the number a float "
            "before the arithmetic (float(n) ** 30); otherwise the graph is corrupt or "
            "hostile"
        )
    return value


def _bounded(op: str, fn: Callable) -> Callable:
    def run(*args):
        return _check_int(fn(*args), op)

    run.__name__ = f"scalar_{op}"
    return run


def _pow(base, exponent):
    ints = isinstance(base, int) and isinstance(exponent, int)
    if ints and exponent > 0 and abs(base) > 1 and exponent * math.log2(abs(base)) > 65:
        _check_int(INT_MAX + 1, "pow")
    return _check_int(operator.pow(base, exponent), "pow")


def _lshift(value, count):
    if isinstance(count, int) and count > 64 and value:
        _check_int(INT_MAX + 1, "lshift")
    return _check_int(operator.lshift(value, count), "lshift")


SCALAR_OPS: dict[str, Callable] = {
    "scalar.add": _bounded("add", operator.add),
    "scalar.sub": _bounded("sub", operator.sub),
    "scalar.mul": _bounded("mul", operator.mul),
    "scalar.truediv": operator.truediv,
    "scalar.floordiv": _bounded("floordiv", operator.floordiv),
    "scalar.mod": operator.mod,
    "scalar.pow": _pow,
    "scalar.neg": _bounded("neg", operator.neg),
    "scalar.abs": _bounded("abs", operator.abs),
    "scalar.eq": operator.eq,
    "scalar.ne": operator.ne,
    "scalar.lt": operator.lt,
    "scalar.le": operator.le,
    "scalar.gt": operator.gt,
    "scalar.ge": operator.ge,
    "scalar.and": operator.and_,
    "scalar.or": operator.or_,
    "scalar.lshift": _lshift,
    "scalar.rshift": operator.rshift,
    "scalar.ceil": _bounded("ceil", math.ceil),
    "scalar.xor": operator.xor,
    "scalar.invert": _bounded("invert", operator.invert),
    "scalar.round": _bounded("round", round),
    "scalar.trunc": _bounded("trunc", math.trunc),
    "scalar.sqrt": math.sqrt,
    "scalar.log": math.log,
    "scalar.log2": math.log2,
    "scalar.log10": math.log10,
    "scalar.exp": math.exp,
    "scalar.floor": _bounded("floor", math.floor),
}
# op-set 9: the float functions of ``math`` that code applies to ``.item()`` values (a
# cosine noise schedule on a timestep: ``math.cos(t.item() / T * math.pi)``), baked into
# the trace before. Each is math's own: a float from numbers, or ValueError/OverflowError
# as in eager Python; none makes an integer, so none can make a size.
MATH_FLOAT_UNARY = tuple(
    "sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf erfc log1p expm1 exp2 "
    "cbrt".split()
)
MATH_FLOAT_BINARY = ("atan2", "hypot", "copysign", "fmod")
SCALAR_OPS.update({f"scalar.{n}": getattr(math, n) for n in MATH_FLOAT_UNARY + MATH_FLOAT_BINARY})
SINCE.update({f"scalar.{n}": 9 for n in MATH_FLOAT_UNARY + MATH_FLOAT_BINARY})
_UNARY_SCALAR = frozenset(
    "neg abs ceil invert round trunc sqrt log log2 log10 exp floor".split() + list(MATH_FLOAT_UNARY)
)

# Hand-written kinds for ops that have no native schema (Python bindings, properties).
_CONVERSIONS = "float double half bfloat16 long int short char byte bool cfloat cdouble"
_HAND_KINDS: dict[str, tuple[tuple, dict]] = {
    "getitem": ((("tensor",), ("index_expr",)), {}),
    "setitem": ((("tensor",), ("index_expr",), ("tensor", "scalar")), {}),
    "set_grad_enabled": ((("bool",),), {}),
    "Tensor.type": (
        (("tensor",), ("dtype", "str", "none"), ("bool",)),
        {"dtype": ("dtype", "str", "none"), "non_blocking": ("bool",)},
    ),
    "Tensor.cpu": ((("tensor",),), {"memory_format": ("memory_format",)}),
    "Tensor.new_tensor": (
        (("tensor",), ("data",)),
        {"dtype": ("dtype", "none"), "device": ("device", "none"), "requires_grad": ("bool",)},
    ),
    "tensor": (
        (("data",),),
        {
            "dtype": ("dtype", "none"),
            "device": ("device", "none"),
            "requires_grad": ("bool",),
            "pin_memory": ("bool",),
        },
    ),
    "as_tensor": (
        (("data", "tensor"),),
        {"dtype": ("dtype", "none"), "device": ("device", "none")},
    ),
    # nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor
    "torchvision.nms": (
        (("tensor",), ("tensor",), ("float",)),
        {"dets": ("tensor",), "scores": ("tensor",), "iou_threshold": ("float",)},
    ),
    **{f"Tensor.{p}": ((("tensor",),), {}) for p in TENSOR_OP_PROPERTIES},
    **{
        f"Tensor.{c}": ((("tensor",),), {"memory_format": ("memory_format",)})
        for c in _CONVERSIONS.split()
    },
}
# The parameter names of hand-written ops where the op has a schema of its own.
_HAND_NAMES = {"torchvision.nms": (("dets",), ("scores",), ("iou_threshold",))}
# Reflected dunders: (self, other) with other a number or a tensor.
for _name in ("__rand__ __ror__ __rxor__ __ilshift__ __irshift__ __imod__ __ifloordiv__").split():
    _HAND_KINDS[f"Tensor.{_name}"] = ((("tensor",), ("tensor", "scalar")), {})


@dataclass(frozen=True)
class OpInfo:
    """One op of the set. ``args[i]`` is the tuple of kinds position ``i`` accepts,
    ``kwargs[name]`` those of a keyword; ``varargs`` is ``(position, kind)`` when sizes may
    be spread over positions (``x.view(2, 3)``). ``flags`` hold ``inplace``, ``random``,
    ``variadic``, ``structural``, ``scalar``, ``private``, ``checked``; ``enums`` the values
    each integer enum parameter may take."""

    name: str
    meaning: str
    impl: Callable | None
    args: tuple[tuple[str, ...], ...]
    kwargs: Mapping[str, tuple[str, ...]]
    varargs: tuple[int, str] | None = None
    flags: frozenset[str] = field(default_factory=frozenset)
    reason: str = ""
    arg_names: tuple[tuple[str, ...], ...] = ()  # the parameter names each position has
    enums: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # parameter -> values

    @property
    def dims(self) -> list:
        """Positions and keywords that hold dimensions (0-based in the file)."""
        return _where(self, ("dim", "dims"))

    @property
    def indices(self) -> list:
        """Positions and keywords that hold indices into a dimension."""
        return _where(self, ("index", "index_tensor"))


def _where(info: OpInfo, kinds: tuple) -> list:
    found: list = [i for i, k in enumerate(info.args) if any(x in kinds for x in k)]
    found += [n for n, k in info.kwargs.items() if any(x in kinds for x in k)]
    return found


def _curated() -> list[str]:
    names = []
    for text in FAMILIES.values():
        names += text.split()
    return names + list(REVIEWED_PRIVATE)


def _registered(qualified: str) -> Callable:
    """A function that calls the registered operator ``qualified`` (``torchvision::nms``),
    looked up when it is called: the library that registers it may be imported later."""
    namespace, op = qualified.split("::")

    def call(*args, **kwargs):
        return getattr(getattr(torch.ops, namespace), op)(*args, **kwargs)

    call.__name__ = f"{namespace}_{op}"
    call.__doc__ = _REGISTERED_MEANINGS[qualified]
    return call


_REGISTERED_IMPLS = {name: _registered(q) for q, name in REGISTERED_OPERATORS.items()}


def _resolve(name: str) -> Callable | None:
    """The callable behind a canonical name written in this file."""
    if name in _SAFE_IMPLS:
        return _SAFE_IMPLS[name]
    if name in _REGISTERED_IMPLS:
        return _REGISTERED_IMPLS[name]
    if name.startswith("Tensor."):
        attr = name[len("Tensor.") :]
        if attr in TENSOR_OP_PROPERTIES:
            return _attr_getter(attr)
        return getattr(torch._C.TensorBase, attr, None) or getattr(torch.Tensor, attr, None)
    if name == "set_grad_enabled":
        return torch._C._set_grad_enabled
    for prefix, ns in (
        ("linalg.", torch._C._linalg),
        ("fft.", torch._C._fft),
        ("special.", torch._C._special),
    ):
        if name.startswith(prefix):
            short = name[len(prefix) :]
            return getattr(ns, f"{prefix[:-1]}_{short}", None) or getattr(ns, short, None)
    if name.startswith("nn."):
        return getattr(torch._C._nn, name[3:], None)
    if name in ("getitem", "setitem"):
        return getattr(torch._C.TensorBase, f"__{name}__")
    return getattr(torch._C._VariableFunctions, name, None) or getattr(torch._C._nn, name, None)


def _attr_getter(name: str) -> Callable:
    def get(tensor):
        return getattr(tensor, name)

    get.__name__ = f"get_{name}"
    return get


def _aten_name(name: str) -> str:
    if name.startswith("Tensor."):
        return name[len("Tensor.") :]
    for prefix in ("linalg.", "fft.", "special."):
        if name.startswith(prefix):
            return prefix[:-1] + "_" + name[len(prefix) :]
    return name[3:] if name.startswith("nn.") else name


def _merge(overloads: list[list[dict]]) -> tuple[tuple, dict, tuple | None, tuple]:
    """Kinds per position and per keyword, merged over the overloads."""
    positions: list[list[str]] = []
    names: list[list[str]] = []
    keywords: dict[str, list[str]] = {}
    varargs = None
    for args in overloads:
        positional = [a for a in args if not a["kwarg_only"]]
        for i, arg in enumerate(positional):
            while len(positions) <= i:
                positions.append([])
                names.append([])
            positions[i] += [k for k in arg["kinds"] if k not in positions[i]]
            if arg["name"] not in names[i]:
                names[i].append(arg["name"])
        for arg in args:
            spellings = [arg["name"]] + (["input"] if arg["name"] == "self" else [])
            for key in spellings:
                slot = keywords.setdefault(key, [])
                slot += [k for k in arg["kinds"] if k not in slot]
        # PyTorch lets a lone size list be spread over the positions: x.view(2, 3).
        rest = (
            positional[1:] if positional and positional[0]["kinds"][0] == "tensor" else positional
        )
        if len(rest) == 1 and rest[0]["kinds"][0] in ("ints", "dims"):
            at = len(positional) - 1
            kind = "dim" if rest[0]["kinds"][0] == "dims" else "int"
            if varargs is None or at < varargs[0]:
                varargs = (at, kind)
    return (
        tuple(tuple(p) for p in positions),
        {k: tuple(v) for k, v in keywords.items()},
        varargs,
        tuple(tuple(n) for n in names),
    )


def _flags(name: str) -> frozenset[str]:
    flags = set()
    base = name.rsplit(".", 1)[-1]
    if name == "setitem" or (base.endswith("_") and not base.endswith("__")):
        flags.add("inplace")
    if base.startswith("__i") and base.endswith("__"):  # x <<= y writes into x
        flags.add("inplace")
    if name in RANDOM_OPS:
        flags.add("random")
    if name in VARIADIC_OUTPUTS:
        flags.add("variadic")
    if name in REVIEWED_PRIVATE:
        flags.add("private")
    if name in CHECKED_OPS:
        flags.add("checked")
    return frozenset(flags)


def _enums(name: str, args: tuple, arg_names: tuple) -> dict[str, tuple[int, ...]]:
    """The enum parameters of op ``name`` (integer parameters named in ``ENUM_ARGUMENTS``)."""
    found = dict(_ENUM_OPS.get(name, {}))
    for kinds, names in zip(args, arg_names):
        if "int" in kinds:
            found.update({n: ENUM_ARGUMENTS[n] for n in names if n in ENUM_ARGUMENTS})
    return found


def _doc_meaning(fn) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
    for line in doc[1:4]:
        if line.strip():
            return line.strip()
    return doc[0].strip() if doc else ""


def _build() -> tuple[dict[str, OpInfo], list[str]]:
    table: dict[str, OpInfo] = {}
    missing: list[str] = []
    for name, meaning in PRIM_OPS.items():
        table[name] = OpInfo(
            name,
            meaning,
            None,
            _PRIM_ARGS[name],
            _PRIM_KWARGS.get(name, {}),
            flags=frozenset({"structural"}),
        )
    for name, fn in SCALAR_OPS.items():
        short = name.split(".", 1)[1]
        arity = 1 if short in _UNARY_SCALAR else 2
        table[name] = OpInfo(
            name,
            f"Python's {short} on traced numbers",
            fn,
            (("scalar",),) * arity,
            {},
            flags=frozenset({"scalar"}),
        )
    for name in _curated():
        fn = _resolve(name)
        if fn is None:
            missing.append(f"{name}: no such function in torch {torch.__version__}")
            continue
        if name in _HAND_KINDS:
            args, kwargs = _HAND_KINDS[name]
            varargs, arg_names = None, _HAND_NAMES.get(name, ())
        else:
            overloads = ops_schema.schemas(_aten_name(name))
            if not overloads:
                missing.append(f"{name}: no native schema and no hand-written kinds")
                continue
            args, kwargs, varargs, arg_names = _merge(overloads)
        table[name] = OpInfo(
            name,
            _doc_meaning(fn),
            fn,
            args,
            kwargs,
            varargs,
            _flags(name),
            REVIEWED_PRIVATE.get(name, ""),
            arg_names,
            _enums(name, args, arg_names),
        )
    return table, missing


OPS, MISSING = _build()


def _name_of() -> dict[object, str]:
    """The callables the tracer may see, each mapped to its canonical op name."""
    found: dict[object, str] = {}
    for name, info in OPS.items():
        if info.impl is None or "scalar" in info.flags or name in _SAFE_IMPLS:
            continue
        if name.startswith("Tensor.") and name[7:] in TENSOR_OP_PROPERTIES:
            continue
        found.setdefault(info.impl, name)
    for name in ("empty", "empty_like"):
        if name in OPS:
            found[getattr(torch._C._VariableFunctions, name)] = name
    if "Tensor.new_empty" in OPS:
        found[torch._C.TensorBase.new_empty] = "Tensor.new_empty"
    base = torch._C.TensorBase
    for method in FOLDED_METHODS:
        fn = getattr(base, method, None)
        if fn is not None and method in OPS:
            found.setdefault(fn, method)
    for dunder, target in DUNDER_OPS.items():
        fn = getattr(base, dunder, None)
        if fn is not None and target in OPS:
            found.setdefault(fn, target)
    for name in OPS:
        if name.startswith("Tensor.__"):
            fn = getattr(torch.Tensor, name[len("Tensor.") :], None)
            if fn is not None:
                found.setdefault(fn, name)
    # ``with torch.no_grad():`` inside traced code reaches the tracer as this call.
    found[torch._C._set_grad_enabled] = "set_grad_enabled"
    return found


NAME_OF = _name_of()
# Properties are read through getset descriptors; the tracer sees ``descriptor.__get__``.
PROPERTY_OF = {
    getattr(torch._C.TensorBase, name): name
    for name in ("shape", "dtype", "device", *TENSOR_OP_PROPERTIES, *TENSOR_META_PROPERTIES)
    if hasattr(torch._C.TensorBase, name)
}
# The op set of version 1, by name, for reading v1 files: a v1 file that names an op left
# out of version 2 gets an error that says so (``removed_in_v2``).


def canonical_name(func) -> str | None:
    """The op name for a callable the tracer saw, or None if it is not an op.

    >>> import torch
    >>> canonical_name(torch.relu), canonical_name(torch.Tensor.view)
    ('relu', 'Tensor.view')
    >>> canonical_name(torch.Tensor.data_ptr) is None
    True
    """
    try:
        found = NAME_OF.get(func)
    except TypeError:  # unhashable callables are never ops
        return None
    if found is None and isinstance(func, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        # A registered operator (torch.ops.torchvision.nms, or its .default overload).
        qualified = getattr(func, "_qualified_op_name", None) or func.name()
        return REGISTERED_OPERATORS.get(qualified.split(".")[0])
    return found


def property_name(func) -> str | None:
    """For a property getter (``Tensor.shape.__get__``), the property's name."""
    owner = getattr(func, "__self__", None)
    if owner is None or type(func).__name__ != "method-wrapper":
        return None
    try:
        return PROPERTY_OF.get(owner)
    except TypeError:
        return None


def info(name: str) -> OpInfo | None:
    """The :class:`OpInfo` of op ``name``, or None for a name outside the op set."""
    return OPS.get(name)


def impl_of(name: str) -> Callable:
    """The function that runs op ``name``; KeyError for a name outside the op set (or a
    structural op, which the runtime runs itself)."""
    fn = OPS[name].impl
    if fn is None:
        raise KeyError(name)
    return fn


def is_known(name: str) -> bool:
    """Whether ``name`` is an op of the set.

    >>> is_known("relu"), is_known("Tensor.data_ptr"), is_known("_from_blob")
    (True, False, False)
    """
    return name in OPS


def is_inplace(name: str) -> bool:
    return name in OPS and "inplace" in OPS[name].flags


def meaning(name: str) -> str:
    """A one-line meaning of an op."""
    return OPS[name].meaning if name in OPS else ""


def all_names() -> list[str]:
    return sorted(OPS)


# Kept for readers of the old module: the names of the old tables.
IMPL = {name: op.impl for name, op in OPS.items() if op.impl is not None}
