"""check_indices: refused exactly when some index is outside [0, vocab), for every integer
dtype, whether the array is checked as a few Python ints or with numpy's reductions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from abi import check_indices
from abi.errors import DTypeError, IndexRangeError

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(INT_DTYPES), st.integers(0, 20), st.integers(1, 300), st.data())
def test_refused_exactly_when_an_index_is_out_of_range(dtype, size, vocab, data):
    info = np.iinfo(dtype)
    values = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=size,
                                max_size=size))
    idx = np.array(values, dtype=dtype).reshape(-1, 1) if size % 2 else np.array(values, dtype)
    as_ints = [int(v) for v in values]
    bad = [v for v in as_ints if not 0 <= v < vocab]
    if bad:
        with pytest.raises(IndexRangeError) as info_:
            check_indices(idx, vocab, "test")
        assert info_.value.values == bad
    else:
        check_indices(idx, vocab, "test")


@pytest.mark.parametrize("idx", [np.array([1.0]), [1], np.array([True])])
def test_non_integer_indices_are_refused(idx):
    with pytest.raises(DTypeError):
        check_indices(idx, 4, "test")
