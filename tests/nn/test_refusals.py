"""Every refusal of the nn layers and kernels, with the abi error class it must raise."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import (ContractError, DomainError, DTypeError, IndexRangeError, ShapeError)
from plugins import nn
from plugins.nn import functional as fn

# --- conv --------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding", ["valid", "not_same", "", "full"])
def test_conv_bad_padding_string(padding):
    with pytest.raises(ContractError, match="padding"):
        nn.Conv2d(16, 32, 2, stride=1, padding=padding)


@pytest.mark.parametrize("stride", [2, (1, 2), (2, 1)])
def test_conv_same_padding_needs_stride_1(stride):
    with pytest.raises(ContractError, match="stride 1"):
        nn.Conv2d(in_channels=16, out_channels=32, kernel_size=2, stride=stride, padding="same")
    with pytest.raises(ContractError, match="stride 1"):
        nn.Conv1d(4, 4, 3, stride=2, padding="Same")


@pytest.mark.parametrize("padding", [-1, (1, 2, 3), (1, -1), (1.5, 1), object()])
def test_conv_bad_padding_values(padding):
    with pytest.raises(ContractError):
        nn.Conv2d(4, 4, 3, padding=padding)


def test_conv_padding_changed_after_construction_is_checked_at_call():
    layer = nn.Conv2d(4, 4, 3)
    layer.padding = "bogus"
    with pytest.raises(ContractError, match="padding"):
        layer(np.zeros((1, 4, 5, 5), np.float32))


def test_conv_wrong_input_channels_names_both_shapes():
    layer = nn.Conv2d(16, 32, 3)
    with pytest.raises(ShapeError) as e:
        layer(np.zeros((1, 8, 9, 9), np.float32))
    msg = str(e.value)
    assert "(1, 8, 9, 9)" in msg and "(32, 16, 3, 3)" in msg and "\n" not in msg
    assert e.value.where == "Conv2d" and e.value.expected == 16 and e.value.got == 8


def test_conv_wrong_rank_and_dtype():
    layer = nn.Conv2d(3, 4, 3)
    with pytest.raises(ShapeError, match="4-D"):
        layer(np.zeros((3, 9, 9), np.float32))
    with pytest.raises(DTypeError, match="float64"):
        layer(np.zeros((1, 3, 9, 9)))
    layer.weight = layer.weight.astype(np.float64)
    with pytest.raises(DTypeError, match="weight"):
        layer(np.zeros((1, 3, 9, 9), np.float32))


def test_conv_weight_of_wrong_shape_is_refused():
    layer = nn.Conv2d(4, 6, 3)
    layer.weight = np.zeros((6, 4, 3, 2), np.float32)
    with pytest.raises(ShapeError, match=r"\(6, 4, 3, 2\).*\(6, 4, 3, 3\)"):
        layer(np.zeros((1, 4, 5, 5), np.float32))
    layer = nn.Conv2d(4, 6, 3)
    layer.bias = np.zeros(5, np.float32)
    with pytest.raises(ShapeError, match="bias"):
        layer(np.zeros((1, 4, 5, 5), np.float32))


def test_conv_input_smaller_than_kernel():
    with pytest.raises(ShapeError, match="smaller than the dilated kernel"):
        nn.Conv2d(1, 1, 3, dilation=2)(np.zeros((1, 1, 4, 9), np.float32))


@pytest.mark.parametrize("cin, cout, groups", [(6, 4, 4), (4, 6, 4), (6, 6, 4), (4, 4, 0)])
def test_conv_groups_must_divide_channels(cin, cout, groups):
    with pytest.raises(ContractError, match="groups"):
        nn.Conv2d(cin, cout, 3, groups=groups)
    with pytest.raises(ContractError, match="groups"):
        nn.ConvTranspose2d(cin, cout, 3, groups=groups)


def test_conv_kernel_attr_refusals():
    w = np.zeros((4, 2, 3, 3), np.float32)
    ok = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=2)
    fn.make_conv(w, None, **ok)
    for bad in (dict(groups=3), dict(stride=(0, 1)), dict(stride=(1,)), dict(dilation=(1, -1)),
                dict(padding=((0, 0),)), dict(padding=((0, -1), (0, 0))), dict(padding=(1, 1)),
                dict(padding="same")):
        with pytest.raises(ContractError):
            fn.make_conv(w, None, **{**ok, **bad})
    with pytest.raises(ShapeError, match="channels"):  # 2 groups x 2 channels = 4 expected
        fn.conv(np.zeros((1, 2, 5, 5), np.float32), w, None, **ok)


# --- conv transpose ----------------------------------------------------------------------------


def test_conv_transpose_refuses_a_conv_weight():
    tl = nn.ConvTranspose2d(16, 32, 3)
    assert tl.weight.shape == (16, 32, 3, 3)
    tl.weight = nn.Conv2d(16, 32, 3).weight  # (32, 16, 3, 3): same name, Conv layout
    with pytest.raises(ShapeError) as e:
        tl(np.zeros((1, 16, 5, 5), np.float32))
    assert "(32, 16, 3, 3)" in str(e.value) and "(16, 32, 3, 3)" in str(e.value)


def test_conv_transpose_refuses_conv_weight_even_when_square():
    # in == out/groups, but groups > 1: a Conv weight (8, 4, 3, 3) vs transpose (8, 2, 3, 3)
    tl = nn.ConvTranspose2d(8, 4, 3, groups=2)
    tl.weight = nn.Conv2d(8, 4, 3, groups=2).weight
    with pytest.raises(ShapeError):
        tl(np.zeros((1, 8, 5, 5), np.float32))


def test_conv_transpose_attr_refusals():
    with pytest.raises(ContractError, match="output_padding"):
        nn.ConvTranspose2d(2, 2, 3, stride=2, output_padding=2)
    with pytest.raises(ContractError, match="padding"):
        nn.ConvTranspose2d(2, 2, 3, padding="same")
    w = np.zeros((3, 2, 3), np.float32)
    with pytest.raises(ContractError, match="groups"):
        fn.make_conv_transpose(w, None, stride=(1,), padding=(0,), output_padding=(0,),
                               dilation=(1,), groups=2)
    with pytest.raises(ShapeError, match="empty output"):
        fn.conv_transpose(np.zeros((1, 3, 1), np.float32), w, None, stride=(1,), padding=(2,),
                          output_padding=(0,), dilation=(1,), groups=1)


# --- normalization -----------------------------------------------------------------------------


def test_groupnorm_channels_not_divisible():
    with pytest.raises(ContractError, match="not divisible"):
        nn.GroupNorm(4, 6)
    gn = nn.GroupNorm(3, 6)
    with pytest.raises(ShapeError, match=r"\(2, 9, 4\)"):
        gn(np.zeros((2, 9, 4), np.float32))
    with pytest.raises(ShapeError, match="num_groups=4"):
        fn.group_norm(np.zeros((2, 6, 4), np.float32), None, None, num_groups=4, eps=1e-5)


def test_instancenorm_checks_channels():
    with pytest.raises(ShapeError, match="expected 3"):
        nn.InstanceNorm(3)(np.zeros((2, 4, 5, 5), np.float32))
    with pytest.raises(ShapeError):
        nn.InstanceNorm(3)(np.zeros((2, 3), np.float32))


def test_layernorm_trailing_dims_mismatch_names_both_shapes():
    with pytest.raises(ShapeError) as e:
        nn.LayerNorm((5, 6))(np.zeros((2, 5, 7), np.float32))
    assert str(e.value) == ("LayerNorm: trailing dims of input (2, 5, 7) must equal "
                            "normalized_shape (5, 6)")
    assert e.value.expected == (5, 6) and e.value.got == (2, 5, 7)
    with pytest.raises(ShapeError, match=r"\(6,\)"):
        nn.LayerNorm(6)(np.zeros((6, 5), np.float32))
    with pytest.raises(ShapeError, match=r"\(2, 4, 3, 3\).*\(5,\)"):
        nn.LayerNorm2d(5)(np.zeros((2, 4, 3, 3), np.float32))
    with pytest.raises(ShapeError):  # fewer dims than normalized_shape
        nn.LayerNorm((2, 3))(np.zeros(3, np.float32))


def test_rmsnorm_refusals():
    with pytest.raises(ShapeError, match="dim 8"):
        nn.RMSNorm(8)(np.zeros((2, 7), np.float32))
    with pytest.raises(DTypeError):
        nn.RMSNorm(4)(np.zeros((2, 4), np.int32))


def test_batchnorm_training_zero_denominator_leaves_state_untouched():
    bn = nn.BatchNorm(4)
    bn.running_mean = np.arange(4, dtype=np.float32)
    bn.running_var = np.arange(1, 5, dtype=np.float32)
    state = {k: v for k, v in bn.abi_tensors().items()}
    copies = {k: None if v is None else v.copy() for k, v in state.items()}
    for x in (np.ones((1, 4), np.float32), np.ones((1, 4, 1, 1), np.float32),
              np.ones((1, 4, 1, 1, 1), np.float32), np.ones((0, 4, 3), np.float32)):
        with pytest.raises(DomainError, match="numel"):
            bn(x, training=True)
    for k, v in bn.abi_tensors().items():
        assert v is state[k], k
        np.testing.assert_array_equal(v, copies[k])
    assert int(bn.num_batches_tracked) == 0
    bn1 = nn.BatchNorm(1)
    with pytest.raises(DomainError):
        bn1(np.ones((1, 1, 1, 1), np.float32), training=True)
    with pytest.raises(DomainError):  # the kernel refuses too
        fn.batchnorm(np.ones((1, 1), np.float32), None, None, None, None, eps=1e-5,
                     momentum=0.1, track_running_stats=False, training=True)


def test_batchnorm_inference_never_writes_state(rng):
    bn = nn.BatchNorm(3)
    bn.running_mean = rng.standard_normal(3, dtype=np.float32)
    bn.running_var = rng.uniform(0.5, 2, 3).astype(np.float32)
    before = {k: v.copy() for k, v in bn.abi_tensors().items()}
    for v in bn.abi_tensors().values():
        v.flags.writeable = False  # any write would raise
    for _ in range(3):
        bn(rng.standard_normal((2, 3, 4, 4), dtype=np.float32))
    for k, v in bn.abi_tensors().items():
        assert v.tobytes() == before[k].tobytes(), k


def test_batchnorm_channel_and_param_checks():
    bn = nn.BatchNorm(4)
    with pytest.raises(ShapeError, match="expected 4"):
        bn(np.zeros((2, 3, 2, 2), np.float32))
    bn.running_var = np.ones(5, np.float32)
    with pytest.raises(ShapeError, match="running_var"):
        bn(np.zeros((2, 4, 2, 2), np.float32))
    with pytest.raises(ContractError, match="missing"):
        fn.batchnorm(np.zeros((2, 4), np.float32), None, None, None, None, eps=1e-5,
                     momentum=0.1, track_running_stats=True)


# --- linear / lstm -----------------------------------------------------------------------------


def test_linear_refusals():
    with pytest.raises(ShapeError, match=r"\(4, 7\).*in_features 8"):
        nn.Linear(8, 2)(np.zeros((4, 7), np.float32))
    with pytest.raises(DTypeError):
        nn.Linear(8, 2)(np.zeros((4, 8), np.float16))


def test_lstm_refusals():
    cell = nn.LSTMCell(5, 4)
    with pytest.raises(ShapeError, match=r"\(2, 6\)"):
        cell(np.zeros((2, 6), np.float32))
    with pytest.raises(ShapeError, match="h"):
        cell(np.zeros((2, 5), np.float32), (np.zeros((3, 4), np.float32),
                                            np.zeros((2, 4), np.float32)))
    with pytest.raises(ShapeError, match="2-D"):
        cell(np.zeros(5, np.float32))
    cell.weight_hh = np.zeros((16, 5), np.float32)
    with pytest.raises(ShapeError, match="weight_hh"):
        cell(np.zeros((2, 5), np.float32))


# --- embedding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("idx", [np.array([1.0, 2.0]), np.array([[0.0]], np.float32),
                                 np.array([True, False]), [1.5]])
def test_embedding_refuses_non_integer_indices(idx):
    layer = nn.Embedding(10, 4)
    with pytest.raises(DTypeError, match="integer"):
        layer(idx)
    with pytest.raises(DTypeError):
        fn.check_embedding_indices(idx, 10, "Embedding")


def test_embedding_refuses_negative_and_too_large_indices():
    layer = nn.Embedding(10, 4)
    idx = np.array([[0, -1, 3], [10, 9, 12]], dtype=np.int64)
    with pytest.raises(IndexRangeError) as e:
        layer(idx)
    err = e.value
    assert err.positions == [(0, 1), (1, 0), (1, 2)]
    assert err.values == [-1, 10, 12]
    assert err.vocab_size == 10 and err.where == "Embedding"
    msg = str(err)
    for text in ("(0, 1)=-1", "(1, 0)=10", "(1, 2)=12", "[0, 10)"):
        assert text in msg
    with pytest.raises(IndexRangeError) as e:
        fn.check_embedding_indices(np.array(7, np.uint8), 5, "node desire")
    assert e.value.positions == [()] and e.value.values == [7]
    assert str(e.value).startswith("node desire:")
    with pytest.raises(IndexRangeError):
        fn.embedding(np.array([2**63], np.uint64), layer.weight)


def test_embedding_never_returns_a_zero_vector(rng):
    layer = nn.Embedding(6, 3)
    layer.weight = rng.uniform(1, 2, (6, 3)).astype(np.float32)  # no zero row anywhere
    for bad in (6, 7, 100, -1, -6):
        with pytest.raises(IndexRangeError):
            layer(np.array([0, bad, 1]))
    out = layer(np.arange(6))
    assert (np.abs(out).sum(axis=-1) > 0).all()


def test_embedding_weight_shape_checked():
    layer = nn.Embedding(6, 3)
    layer.weight = np.zeros((3, 6), np.float32)
    with pytest.raises(ShapeError, match=r"\(3, 6\).*\(6, 3\)"):
        layer(np.array([0]))


# --- kernels never write their arguments -------------------------------------------------------


def _frozen(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def test_kernels_accept_read_only_arguments(rng):
    def r(*shape):
        return _frozen(rng.standard_normal(shape, dtype=np.float32))

    x4 = r(2, 4, 6, 6)
    fn.conv(x4, r(6, 2, 3, 3), r(6), stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
            groups=2)
    fn.conv_transpose(x4, r(4, 3, 2, 2), r(3), stride=(2, 2), padding=(0, 0),
                      output_padding=(0, 0), dilation=(1, 1), groups=1)
    fn.batchnorm(x4, r(4), r(4), r(4), _frozen(np.ones(4, np.float32)), _frozen(np.zeros((),
                 np.int64)), eps=1e-5, momentum=0.1, track_running_stats=True)
    fn.batchnorm(x4, r(4), r(4), None, None, eps=1e-5, momentum=0.1, track_running_stats=False,
                 training=True)
    fn.group_norm(x4, r(4), r(4), num_groups=2, eps=1e-5)
    fn.instance_norm(x4, r(4), r(4), eps=1e-5)
    fn.layer_norm(x4, r(6, 6), r(6, 6), normalized_shape=(6, 6), eps=1e-5)
    fn.layer_norm2d(x4, r(4), r(4), normalized_shape=(4,), eps=1e-5)
    fn.rms_norm(x4, r(6), eps=1e-6)
    fn.linear(x4, r(3, 6), r(3))
    fn.lstm_cell(r(2, 5), r(2, 3), r(2, 3), r(12, 5), r(12, 3), r(12), r(12))
    fn.embedding(_frozen(np.array([1, 2])), r(4, 3))
