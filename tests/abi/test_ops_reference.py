"""The shape rules against what torch and numpy actually do, over generated hyper-parameters.

For every generated case either both the rule and the reference refuse it, or both accept it
and the rule's output shape is the shape the reference produces on random data.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abi.errors import ContractError
from abi.ops.table import TensorType, get_op, infer_shapes

T = TensorType
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def infer(op, inputs, attrs):
    return infer_shapes(get_op(op), inputs, attrs)


def tt(t):
    return T(tuple(t.shape), str(t.dtype).removeprefix("torch."))


def agree(op, inputs, attrs, reference, *, empty_is_refused=False):
    """Run the rule and the reference; assert they accept/refuse together and agree on shapes.

    ``empty_is_refused``: the rule is stricter than the reference on purpose and refuses an
    output with an empty spatial axis (torch returns one for some transposed convolutions).
    """
    try:
        expected = reference()
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        if empty_is_refused and any(0 in e.shape[2:] for e in expected):
            raise ValueError("empty output")
    except (RuntimeError, ValueError, IndexError) as e:
        with pytest.raises(ContractError):
            infer(op, inputs, attrs)
        return str(e)
    assert infer(op, inputs, attrs) == [tt(e) for e in expected]
    return None


def _torch_pads(pairs, value=0.0):
    """[before, after] per axis in natural order -> torch's F.pad order (last axis first)."""
    return [p for pair in reversed(pairs) for p in pair]


small = st.integers


@st.composite
def conv_cases(draw):
    spatial = draw(small(1, 3))
    groups = draw(small(1, 3))
    cin, cout = groups * draw(small(1, 2)), groups * draw(small(1, 2))
    per_axis = lambda s: draw(st.lists(s, min_size=spatial, max_size=spatial))  # noqa: E731
    return dict(
        n=draw(small(1, 2)), groups=groups, cin=cin, cout=cout,
        sizes=per_axis(small(1, 9 if spatial < 3 else 6)), kernel=per_axis(small(1, 4)),
        stride=per_axis(small(1, 3)), dilation=per_axis(small(1, 3)),
        padding=per_axis(st.tuples(small(0, 3), small(0, 3))), bias=draw(st.booleans()))


@SETTINGS
@given(conv_cases())
def test_conv_matches_torch(c):
    x = torch.randn(c["n"], c["cin"], *c["sizes"])
    w = torch.randn(c["cout"], c["cin"] // c["groups"], *c["kernel"])
    b = torch.randn(c["cout"]) if c["bias"] else None
    conv = (F.conv1d, F.conv2d, F.conv3d)[len(c["sizes"]) - 1]
    attrs = {"stride": c["stride"], "padding": c["padding"], "dilation": c["dilation"],
             "groups": c["groups"]}
    agree("conv", [tt(x), tt(w), None if b is None else tt(b)], attrs,
          lambda: conv(F.pad(x, _torch_pads(c["padding"])), w, b, c["stride"], 0,
                       c["dilation"], c["groups"]))


@st.composite
def conv_transpose_cases(draw):
    spatial = draw(small(1, 3))
    groups = draw(small(1, 3))
    per_axis = lambda s: draw(st.lists(s, min_size=spatial, max_size=spatial))  # noqa: E731
    return dict(
        n=draw(small(1, 2)), groups=groups, cin=groups * draw(small(1, 2)),
        out_per_group=draw(small(1, 2)), sizes=per_axis(small(1, 6)),
        kernel=per_axis(small(1, 4)), stride=per_axis(small(1, 3)),
        dilation=per_axis(small(1, 3)), padding=per_axis(small(0, 2)),
        output_padding=per_axis(small(0, 2)), bias=draw(st.booleans()))


@SETTINGS
@given(conv_transpose_cases())
def test_conv_transpose_matches_torch(c):
    x = torch.randn(c["n"], c["cin"], *c["sizes"])
    w = torch.randn(c["cin"], c["out_per_group"], *c["kernel"])
    b = torch.randn(c["out_per_group"] * c["groups"]) if c["bias"] else None
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[len(c["sizes"]) - 1]
    attrs = {k: c[k] for k in ("stride", "padding", "output_padding", "dilation", "groups")}
    agree("conv_transpose", [tt(x), tt(w), None if b is None else tt(b)], attrs,
          lambda: conv(x, w, b, c["stride"], c["padding"], c["output_padding"], c["groups"],
                       c["dilation"]), empty_is_refused=True)


@st.composite
def pool_cases(draw, symmetric):
    spatial = draw(small(1, 3))
    per_axis = lambda s: draw(st.lists(s, min_size=spatial, max_size=spatial))  # noqa: E731
    kernel = per_axis(small(1, 5))
    # mostly legal padding (symmetric: torch's rule, <= kernel // 2, as torch is the reference
    # there; asymmetric: ONNX's, < kernel), sometimes as wide as the kernel, which both refuse
    widest = (lambda k: k // 2) if symmetric else (lambda k: k - 1)
    pad = lambda k: k if draw(small(0, 4)) == 0 else draw(small(0, widest(k)))  # noqa: E731
    return dict(
        sizes=per_axis(small(1, 10)), kernel=kernel, stride=per_axis(small(1, 3)),
        dilation=per_axis(small(1, 3)),
        padding=[(p, p) for p in map(pad, kernel)] if symmetric else
        [(pad(k), pad(k)) for k in kernel],
        ceil_mode=draw(st.booleans()) if symmetric else False,
        count_include_pad=draw(st.booleans()))


@SETTINGS
@given(pool_cases(symmetric=True), st.booleans())
def test_pools_match_torch(c, use_max):
    x = torch.randn(2, 3, *c["sizes"])
    spatial = len(c["sizes"])
    pads = [p for p, _ in c["padding"]]
    if use_max:
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[spatial - 1]
        attrs = {k: c[k] for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
                 if k != "kernel_size"} | {"kernel_size": c["kernel"]}
        agree("max_pool", [tt(x)], attrs, lambda: _no_window_of_padding_alone(pool(
            x, c["kernel"], c["stride"], pads, c["dilation"], c["ceil_mode"])))
    else:
        pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[spatial - 1]
        attrs = {"kernel_size": c["kernel"], "stride": c["stride"], "padding": c["padding"],
                 "ceil_mode": c["ceil_mode"], "count_include_pad": c["count_include_pad"]}
        if spatial == 3 and any(n < k for n, k in zip(c["sizes"], c["kernel"])):
            # torch's avg_pool3d alone refuses an input smaller than the kernel even where
            # the padding makes up for it; onnxruntime pools it, with max_pool's output length
            pool = lambda x, k, s, p, ceil, _: F.max_pool3d(x, k, s, p, 1, ceil)  # noqa: E731
        agree("avg_pool", [tt(x)], attrs, lambda: pool(x, c["kernel"], c["stride"], pads,
                                                        c["ceil_mode"], c["count_include_pad"]))


@SETTINGS
@given(pool_cases(symmetric=False))
def test_asymmetric_max_pool_matches_explicit_padding(c):
    """Asymmetric [before, after] padding == padding with -inf first, then pooling unpadded."""
    x = torch.randn(1, 2, *c["sizes"])
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[len(c["sizes"]) - 1]
    attrs = {"kernel_size": c["kernel"], "stride": c["stride"], "padding": c["padding"],
             "dilation": c["dilation"]}
    padded = F.pad(x, _torch_pads(c["padding"]), value=float("-inf"))

    def reference():
        if any(max(p) >= k for p, k in zip(c["padding"], c["kernel"])):
            raise ValueError("padding must be less than the kernel (ONNX's rule)")
        return _no_window_of_padding_alone(pool(padded, c["kernel"], c["stride"], 0,
                                                c["dilation"]))
    agree("max_pool", [tt(x)], attrs, reference)


def _no_window_of_padding_alone(y):
    """torch's max pool ``y`` of a finite x; a -inf in it is a window of padding alone (a
    dilated window may skip every element), which the ABI refuses: ValueError."""
    if torch.isinf(y).any():
        raise ValueError("a window of padding alone")
    return y


def test_hypothesis_covers_both_outcomes():
    """The generated cases above are not all refusals (nor all accepted): spot-check both."""
    assert agree("conv", [T((1, 2, 3), "float32"), T((1, 2, 5), "float32")],
                 {"stride": [1], "padding": [[0, 0]], "dilation": [1]},
                 lambda: F.conv1d(torch.zeros(1, 2, 3), torch.zeros(1, 2, 5))) is not None
    assert agree("conv", [T((1, 2, 5), "float32"), T((1, 2, 5), "float32")],
                 {"stride": [1], "padding": [[0, 0]], "dilation": [1]},
                 lambda: F.conv1d(torch.zeros(1, 2, 5), torch.zeros(1, 2, 5))) is None


# --- numpy-defined glue -----------------------------------------------------------------------

shapes = st.lists(small(1, 3), min_size=0, max_size=4).map(tuple)


@SETTINGS
@given(st.lists(small(1, 3), min_size=1, max_size=4), st.lists(small(1, 3), min_size=1,
                                                                max_size=4))
def test_matmul_matches_numpy(a, b):
    x, y = np.zeros(a, np.float32), np.zeros(b, np.float32)
    agree("matmul", [T(tuple(a), "float32"), T(tuple(b), "float32")], {},
          lambda: torch.from_numpy(np.asarray(np.matmul(x, y))))


@SETTINGS
@given(shapes, shapes, st.sampled_from(["add", "sub", "mul", "div"]))
def test_broadcasting_matches_numpy(a, b, op):
    agree(op, [T(a, "float32"), T(b, "float32")], {},
          lambda: torch.zeros(np.broadcast_shapes(a, b)))


@SETTINGS
@given(st.lists(small(0, 3), min_size=0, max_size=4).map(tuple), small(-5, 4), small(-5, 4))
def test_flatten_matches_torch(shape, start, end):
    x = torch.zeros(shape)
    agree("flatten", [tt(x)], {"start_dim": start, "end_dim": end},
          lambda: torch.flatten(x, start, end))


@st.composite
def slice_cases(draw):
    shape = draw(st.lists(small(0, 6), min_size=1, max_size=3))
    axes = draw(st.permutations(range(len(shape))))[: draw(small(1, len(shape)))]
    k = len(axes)
    ints = st.lists(small(-9, 9) | st.sampled_from([-2**63, 2**63 - 1]), min_size=k,
                    max_size=k)
    steps = st.lists(small(-3, 3).filter(bool), min_size=k, max_size=k)
    axes = [a - len(shape) if draw(st.booleans()) else a for a in axes]
    return shape, draw(ints), draw(ints), axes, draw(steps)


@SETTINGS
@given(slice_cases())
def test_slice_matches_numpy(case):
    shape, starts, ends, axes, steps = case
    x = np.zeros(shape, np.float32)
    index = [slice(None)] * len(shape)
    for s, e, a, st_ in zip(starts, ends, axes, steps):
        # ONNX's clamp where it parts from numpy's: a negative step from a start before the
        # first position starts at 0 (onnxruntime's Slice: tests/abi/test_slice_clamp.py)
        index[a] = slice(0 if st_ < 0 and s < -shape[a] else s, e, st_)
    agree("slice", [T(tuple(shape), "float32")],
          {"starts": starts, "ends": ends, "axes": axes, "steps": steps},
          lambda: torch.from_numpy(x[tuple(index)].copy()))


@SETTINGS
@given(st.lists(small(0, 5), min_size=1, max_size=3), st.data())
def test_split_matches_numpy(shape, data):
    axis = data.draw(small(-len(shape), len(shape) - 1))
    dim = shape[axis]
    cuts = sorted(data.draw(st.lists(small(0, dim), max_size=3)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, dim])]
    if data.draw(st.booleans()):  # sometimes a wrong total
        sizes[-1] += data.draw(small(1, 2))
    x = np.zeros(shape, np.float32)

    def reference():
        if sum(sizes) != dim:
            raise ValueError("sizes do not sum to the dim")
        return [torch.from_numpy(p) for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis)]
    agree("split", [T(tuple(shape), "float32")], {"axis": axis, "sizes": sizes}, reference)


@SETTINGS
@given(st.lists(small(0, 4), min_size=1, max_size=3), st.data(),
       st.sampled_from(["constant", "reflect", "edge"]))
def test_pad_matches_numpy(shape, data, mode):
    pads = data.draw(st.lists(st.tuples(small(0, 4), small(0, 4)), min_size=len(shape),
                              max_size=len(shape)))
    x = np.zeros(shape, np.float32)

    def reference():
        if mode == "reflect" and any(max(p) >= d for p, d in zip(pads, shape)):
            raise ValueError("reflect padding must be smaller than the dim (torch's rule)")
        return torch.from_numpy(np.pad(x, pads, mode=mode))
    agree("pad", [T(tuple(shape), "float32")], {"pads": pads, "mode": mode}, reference)


@pytest.mark.parametrize("shape, target", [((2, 3, 4), (6, -1)), ((2, 3, 4), (24,)),
                                           ((0, 3), (-1, 3)), ((2, 3), (7, -1)),
                                           ((2, 3), (3, 3)), ((1,), ())])
def test_reshape_matches_numpy(shape, target):
    x = np.zeros(shape, np.float32)
    agree("reshape", [T(shape, "float32")], {"shape": list(target)},
          lambda: torch.from_numpy(x.reshape(target)))


@pytest.mark.parametrize("shape, perm", [((2, 3, 4), (2, 0, 1)), ((5,), (0,)), ((), ())])
def test_transpose_matches_numpy(shape, perm):
    x = np.zeros(shape, np.float32)
    agree("transpose", [T(shape, "float32")], {"perm": list(perm)},
          lambda: torch.from_numpy(np.transpose(x, perm).copy()))
