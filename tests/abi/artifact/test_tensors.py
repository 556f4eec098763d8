"""The tensor section: layout, hashing, padding, zero-copy read-only views (abi only)."""

import hashlib
import io
import mmap

import numpy as np
import pytest

from abi.artifact import plan_tensors, root_digest, tensor_views, verify_section, write_section
from abi.errors import ArtifactFormatError, TensorHashError


def _section(items):
    entries, length = plan_tensors(items)
    buf = io.BytesIO()
    write_section(buf, entries, [a for _, _, a in items], length)
    data = buf.getvalue()
    assert len(data) == length
    return entries, length, data


ITEMS = [("a", "weight", np.arange(5, dtype=np.float32)),
         ("b.running_var", "state", np.ones((2, 3), np.float64)),
         ("n", "state", np.array(7, np.int64)),
         ("empty", "weight", np.zeros((0, 4), np.float32)),
         ("flags", "golden", np.array([True, False]))]


def test_layout_is_aligned_sequential_and_zero_padded():
    entries, length, data = _section(ITEMS)
    end = 0
    for e, (_, _, array) in zip(entries, ITEMS):
        assert e.offset % 64 == 0 and e.offset == -(-end // 64) * 64
        assert data[end:e.offset] == bytes(e.offset - end)
        assert data[e.offset:e.offset + e.nbytes] == array.tobytes()
        assert e.sha256 == hashlib.sha256(array.tobytes()).hexdigest()
        end = e.offset + e.nbytes
    assert length == -(-end // 64) * 64 and data[end:] == bytes(length - end)


def test_verify_accepts_the_written_section_and_names_every_bad_tensor():
    entries, length, data = _section(ITEMS)
    root = root_digest(entries)
    for workers in (1, 2):
        verify_section(memoryview(data), entries, length, root, workers=workers)
    bad = bytearray(data)
    bad[entries[0].offset] ^= 1
    bad[entries[2].offset + 7] ^= 0x80
    with pytest.raises(TensorHashError) as info:
        verify_section(memoryview(bytes(bad)), entries, length, root)
    assert info.value.tensors == ["a", "n"] and "a, n" in str(info.value)


def test_verify_recomputes_the_root_digest():
    entries, length, data = _section(ITEMS)
    with pytest.raises(TensorHashError, match="root digest"):
        verify_section(memoryview(data), entries, length, "0" * 64)


@pytest.mark.parametrize("where", ["gap", "tail"])
def test_verify_refuses_nonzero_padding(where):
    entries, length, data = _section(ITEMS)
    bad = bytearray(data)
    bad[entries[0].offset + entries[0].nbytes if where == "gap" else length - 1] = 1
    with pytest.raises(ArtifactFormatError, match="padding"):
        verify_section(memoryview(bytes(bad)), entries, length, root_digest(entries))


def test_large_sections_hash_in_parallel_the_same():
    rng = np.random.default_rng(0)
    items = [(f"t{i}", "weight", rng.standard_normal(300_000).astype(np.float32))
             for i in range(4)]
    entries, length, data = _section(items)
    verify_section(memoryview(data), entries, length, root_digest(entries), workers=4)
    bad = bytearray(data)
    bad[entries[3].offset + 1_000_000] ^= 1
    with pytest.raises(TensorHashError) as info:
        verify_section(memoryview(bytes(bad)), entries, length, root_digest(entries), workers=4)
    assert info.value.tensors == ["t3"]


def test_views_are_read_only_and_share_the_map(tmp_path):
    entries, length, data = _section(ITEMS)
    path = tmp_path / "s"
    path.write_bytes(bytes(128) + data)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    views = tensor_views(mm, 128, entries)
    whole = np.frombuffer(mm, dtype=np.uint8)
    for e, (name, _, array) in zip(entries, ITEMS):
        v = views[name]
        assert v.dtype == array.dtype and v.shape == array.shape
        assert np.array_equal(v, array)
        assert not v.flags.writeable
        if v.nbytes:
            assert np.shares_memory(v, whole) and not v.flags.owndata
    with pytest.raises(ValueError):
        views["a"][0] = 1.0
