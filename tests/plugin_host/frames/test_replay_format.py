"""The recorded-frames file: round trip, and every hostile or damaged file refused with a typed
error before anything large is allocated."""

from __future__ import annotations

import struct
import zlib

import msgpack
import numpy as np
import pytest

from abi.artifact import canonical
from plugin_host.errors import ReplayFormatError
from plugin_host.frames import (FrameLayout, ReplayLimits, ReplayReader, ReplayWriter,
                                 salvage)

LAYOUT = FrameLayout.create("NV12", 4, 2, stride_align=1)  # 12 bytes a frame


def frame_bytes(i: int) -> bytes:
    return bytes((i * 16 + k) % 256 for k in range(LAYOUT.nbytes))


def write(path, n=3, layout=LAYOUT, start=10):
    with ReplayWriter(path, layout, camera="road", source="synthetic") as w:
        for i in range(n):
            w.write(start + i, 1_000 + 50 * i, 1_010 + 50 * i, frame_bytes(i))
    return path


def test_round_trip(tmp_path):
    path = write(tmp_path / "a.phf")
    with ReplayReader(path) as r:
        assert (r.camera, r.source, r.layout, len(r)) == ("road", "synthetic", LAYOUT, 3)
        assert [(i.frame_id, i.timestamp_sof, i.timestamp_eof) for i in r.records] == \
            [(10, 1000, 1010), (11, 1050, 1060), (12, 1100, 1110)]
        assert [data for _, data in r] == [frame_bytes(i) for i in range(3)]
        buf = np.zeros(64, np.uint8)
        r.read_into(1, buf)
        assert bytes(buf[:12]) == frame_bytes(1)
        r.verify()


def test_the_writer_never_leaves_a_half_file(tmp_path):
    path = tmp_path / "a.phf"
    with pytest.raises(RuntimeError):
        with ReplayWriter(path, LAYOUT, camera="road") as w:
            w.write(0, 0, 0, frame_bytes(0))
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    write(path)
    with pytest.raises(ReplayFormatError, match="already exists"):
        ReplayWriter(path, LAYOUT, camera="road")


def test_the_writer_refuses_a_place_it_cannot_write_in_one_typed_error(tmp_path,
                                                                       monkeypatch):
    (tmp_path / "folder").mkdir()
    with pytest.raises(ReplayFormatError, match="is a folder"):
        ReplayWriter(tmp_path / "folder", LAYOUT, camera="road", overwrite=True)
    with pytest.raises(ReplayFormatError, match="cannot create: No such file or directory"):
        ReplayWriter(tmp_path / "missing" / "a.phf", LAYOUT, camera="road")
    # a full disk while writing, or while closing: typed, and no partial file is left
    writer = ReplayWriter(tmp_path / "a.phf", LAYOUT, camera="road")
    writer.write(0, 0, 0, frame_bytes(0))
    real = writer._file

    class Full:
        def write(self, data):
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(real, name)

    writer._file = Full()
    with pytest.raises(ReplayFormatError, match="cannot write frame 1: No space left"):
        writer.write(1, 1, 1, frame_bytes(1))
    writer._file = real
    monkeypatch.setattr("plugin_host.frames.replay_format.os.fsync",
                        lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(ReplayFormatError, match="cannot write: No space left"):
        writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]


@pytest.mark.parametrize("frame_id, sof, eof, data, match", [
    (5, 100, 110, frame_bytes(0), "does not follow"),      # id not increasing
    (20, 10, 20, frame_bytes(0), "does not follow"),       # sof going backwards
    (20, 200, 100, frame_bytes(0), "sof <= eof"),
    (20, 200, 300, b"short", "bytes, the layout needs"),
])
def test_the_writer_refuses_what_the_reader_would(tmp_path, frame_id, sof, eof, data, match):
    w = ReplayWriter(tmp_path / "a.phf", LAYOUT, camera="road")
    w.write(10, 100, 110, frame_bytes(0))
    with pytest.raises(ReplayFormatError, match=match):
        w.write(frame_id, sof, eof, data)
    w.abort()


# --- hostile files ---------------------------------------------------------------------------


def header(meta: bytes, *, magic=b"\x89PHFRM\r\n", version=1, crc=None, reserved=bytes(12),
           meta_len=None):
    return struct.pack("<8sIII12s", magic, version, len(meta) if meta_len is None else meta_len,
                       zlib.crc32(meta) if crc is None else crc, reserved) + meta


FILE_META = {"camera": "road", "source": "", **LAYOUT.to_dict()}
LAYOUT_META = {k: v for k, v in LAYOUT.to_dict().items() if k != "nbytes"}


def record(frame_id=0, sof=0, eof=0, data=None, *, meta=None, crc=None, magic=b"PHFR",
           meta_len=None, data_len=None):
    data = frame_bytes(frame_id) if data is None else data
    unsigned = {"frame_id": frame_id, "timestamp_sof": sof, "timestamp_eof": eof, **LAYOUT_META}
    if meta is None:
        crc = zlib.crc32(data, zlib.crc32(canonical.encode(unsigned))) if crc is None else crc
        meta = canonical.encode({**unsigned, "crc32": crc})
    return struct.pack("<4sIQ", magic, len(meta) if meta_len is None else meta_len,
                       len(data) if data_len is None else data_len) + meta + data


GOOD_HEAD = header(canonical.encode(FILE_META))

HOSTILE = {
    "empty": (b"", "truncated"),
    "bad magic": (header(canonical.encode(FILE_META), magic=b"\x89PHART\r\n"), "bad magic"),
    "version 2": (header(canonical.encode(FILE_META), version=2), "version 2"),
    "reserved bytes": (header(canonical.encode(FILE_META), reserved=b"\x01" + bytes(11)),
                       "reserved"),
    "huge metadata length": (header(b"", meta_len=2**32 - 1), "outside"),
    "metadata crc": (header(canonical.encode(FILE_META), crc=1), "CRC-32 mismatch"),
    "non-canonical metadata": (header(msgpack.packb(dict(reversed(FILE_META.items())))),
                               "bad metadata"),
    "metadata not a map": (header(canonical.encode([1, 2])), "must be a map"),
    "unknown key": (header(canonical.encode({**FILE_META, "extra": 1})), "exactly the keys"),
    "bad layout": (header(canonical.encode({**FILE_META, "strides": [1, 4]})), "stride"),
    "frame too big": (header(canonical.encode({**FILE_META, "width": 16384, "height": 16384,
                                               "strides": [16384, 16384],
                                               "offsets": [0, 16384 * 16384],
                                               "nbytes": 16384 * 16384 * 3 // 2})), "nbytes"),
    "truncated record header": (GOOD_HEAD + record()[:10], "truncated"),
    "record magic": (GOOD_HEAD + record(magic=b"XXXX"), "bad record magic"),
    "huge record metadata": (GOOD_HEAD + record(meta_len=2**31), "outside"),
    "huge data length": (GOOD_HEAD + record(data_len=2**62), "differs from the frame size"),
    "truncated data": (GOOD_HEAD + record()[:-1], "truncated"),
    "trailing bytes": (GOOD_HEAD + record() + b"\x00", "truncated"),
    "ids not increasing": (GOOD_HEAD + record(3) + record(3), "does not increase"),
    "timestamps backwards": (GOOD_HEAD + record(1, 500, 500) + record(2, 400, 400),
                             "goes backwards"),
    "eof before sof": (GOOD_HEAD + record(1, 500, 400), "before timestamp_sof"),
    "record layout differs": (GOOD_HEAD + record(meta=canonical.encode({
        "frame_id": 0, "timestamp_sof": 0, "timestamp_eof": 0, "crc32": 0,
        **{**LAYOUT_META, "strides": [4, 4], "offsets": [0, 9]}})), "differs from the file"),
    "negative id": (GOOD_HEAD + record(meta=canonical.encode({
        "frame_id": -1, "timestamp_sof": 0, "timestamp_eof": 0, "crc32": 0, **LAYOUT_META})),
        "frame_id must be"),
    "missing key": (GOOD_HEAD + record(meta=canonical.encode({
        "frame_id": 1, "timestamp_sof": 0, "timestamp_eof": 0, **LAYOUT_META})),
        "exactly the keys"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_are_refused_at_open(tmp_path, name):
    data, match = HOSTILE[name]
    path = tmp_path / "x.phf"
    path.write_bytes(data)
    with pytest.raises(ReplayFormatError, match=match) as info:
        ReplayReader(path)
    assert info.value.path == str(path)


def test_a_data_checksum_mismatch_is_refused_when_read(tmp_path):
    path = tmp_path / "x.phf"
    path.write_bytes(GOOD_HEAD + record(0, crc=123))
    with ReplayReader(path) as r:  # structure is fine: the data is checked when read
        with pytest.raises(ReplayFormatError, match="CRC-32 mismatch in frame 0") as info:
            r.read(0)
        assert info.value.offset == len(GOOD_HEAD)
        with pytest.raises(ReplayFormatError):
            r.verify()


def test_every_single_changed_byte_is_refused(tmp_path):
    """Flip each byte of a small file (two ways): open + verify must refuse every mutant."""
    good = write(tmp_path / "good.phf", n=2).read_bytes()
    path = tmp_path / "m.phf"
    accepted = []
    for pos in range(len(good)):
        for mask in (0x01, 0x80):
            mutant = bytearray(good)
            mutant[pos] ^= mask
            path.write_bytes(mutant)
            try:
                with ReplayReader(path) as r:
                    r.verify()
            except ReplayFormatError:
                continue
            accepted.append((pos, mask))
    assert accepted == []


def test_caps_are_configurable(tmp_path):
    path = write(tmp_path / "a.phf", n=3)
    with pytest.raises(ReplayFormatError, match="more than 2 frames"):
        ReplayReader(path, limits=ReplayLimits(max_frames=2))
    with pytest.raises(ReplayFormatError, match="nbytes"):
        ReplayReader(path, limits=ReplayLimits(max_frame_bytes=8))
    with pytest.raises(ReplayFormatError, match="cannot open"):
        ReplayReader(tmp_path / "missing.phf")


def test_a_record_cut_short_is_dropped_on_close(tmp_path, monkeypatch):
    # Ctrl-C can land between the writes of one record; the file must end at the last whole one
    import numpy as np

    from plugin_host.frames import FrameLayout
    from plugin_host.frames.replay_format import ReplayReader, ReplayWriter

    layout = FrameLayout.create("GRAY", 8, 4)
    writer = ReplayWriter(tmp_path / "cut.phf", layout, camera="c", source="test")
    data = np.zeros(layout.nbytes, np.uint8)
    writer.write(1, 10, 20, data)
    real_write = writer._file.write
    calls = []

    def interrupted(chunk):
        calls.append(len(chunk))
        if len(calls) == 2:  # after the record header, before its metadata and bytes
            raise KeyboardInterrupt
        return real_write(chunk)

    monkeypatch.setattr(writer._file, "write", interrupted)
    try:
        writer.write(2, 30, 40, data)
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    writer.close()
    with ReplayReader(tmp_path / "cut.phf") as reader:
        assert len(reader) == 1
        reader.verify()


# -- salvage: the whole frames of a recording that was cut off -----------------------------------

def _record_ends(path) -> list[int]:
    with ReplayReader(path) as r:
        return [info.data_offset + r.layout.nbytes for info in r.records]


def test_salvage_keeps_every_whole_frame_wherever_the_file_was_cut(tmp_path):
    whole = write(tmp_path / "whole.phf", n=3).read_bytes()
    ends = _record_ends(tmp_path / "whole.phf")
    first_record = ends[0] - (ends[1] - ends[0])
    for cut in range(first_record, len(whole)):
        torn, out = tmp_path / "torn.partial", tmp_path / "out.phf"
        torn.write_bytes(whole[:cut])
        kept_frames = sum(end <= cut for end in ends)
        if kept_frames == 0:
            why = "ends after its header" if cut == first_record else ": .*truncated"
            with pytest.raises(ReplayFormatError, match=f"no whole frame to salvage.*{why}"):
                salvage(torn, out, overwrite=True)
            continue
        kept = salvage(torn, out, overwrite=True)
        kept_bytes = max(end for end in ends if end <= cut)
        assert (kept.frames, kept.first_id, kept.last_id) == (kept_frames, 10,
                                                            9 + kept_frames), cut
        assert (kept.kept_bytes, kept.dropped_bytes) == (kept_bytes, cut - kept_bytes)
        assert (kept.reason is None) == (cut == kept_bytes)
        assert out.read_bytes() == whole[:kept_bytes]
        with ReplayReader(out) as r:
            r.verify()
        assert torn.read_bytes() == whole[:cut]  # the source is left as it was
    assert not list(tmp_path.glob(".out.phf.*"))  # no temporary file left behind


def test_salvage_drops_a_tail_that_was_never_written_or_is_damaged(tmp_path):
    path = write(tmp_path / "a.phf", n=3)
    ends = _record_ends(path)
    size = ends[-1] - ends[-2]
    with open(path, "ab") as f:  # the file grew but its last blocks were never written
        f.write(bytes(size))
    kept = salvage(path, tmp_path / "b.phf")
    assert (kept.frames, kept.dropped_bytes) == (3, size)
    assert kept.reason == f"at byte {ends[-1]}: record 3: bad record magic"
    data = bytearray(path.read_bytes()[:ends[-1]])
    data[ends[1] - 1] ^= 0xFF  # the last byte of frame 1's data
    path.write_bytes(bytes(data))
    kept = salvage(path, tmp_path / "c.phf")
    assert (kept.frames, kept.last_id, kept.dropped_bytes) == (1, 10, ends[-1] - ends[0])
    assert "CRC-32 mismatch in frame 11" in kept.reason


def test_salvage_refuses_a_file_it_cannot_read_or_a_place_it_must_not_write(tmp_path):
    path = write(tmp_path / "a.phf")
    (tmp_path / "junk").write_bytes(b"\x89PHFRM\r\n" + bytes(100))
    with pytest.raises(ReplayFormatError, match="junk.*format version 0"):
        salvage(tmp_path / "junk", tmp_path / "b.phf")
    with pytest.raises(ReplayFormatError, match="cannot open"):
        salvage(tmp_path / "missing", tmp_path / "b.phf")
    (tmp_path / "b.phf").write_bytes(b"precious")
    with pytest.raises(ReplayFormatError, match="already exists"):
        salvage(path, tmp_path / "b.phf")
    assert (tmp_path / "b.phf").read_bytes() == b"precious"
    (tmp_path / "dir").mkdir()
    with pytest.raises(ReplayFormatError, match="is a folder"):
        salvage(path, tmp_path / "dir", overwrite=True)
    with pytest.raises(ReplayFormatError, match="nowhere/b.phf: cannot write: No such file"):
        salvage(path, tmp_path / "nowhere" / "b.phf")


def test_salvage_shows_its_progress(tmp_path):
    path = write(tmp_path / "a.phf", n=4)
    seen = []
    salvage(path, tmp_path / "b.phf", progress=lambda done, total: seen.append((done, total)))
    size = path.stat().st_size
    assert len(seen) == 4 and all(total == size for _, total in seen)
    assert [done for done, _ in seen] == sorted({done for done, _ in seen})
    assert seen[-1] == (size, size)


def test_the_summary_tells_frames_gaps_rate_and_exposure_from_the_index(tmp_path):
    path = tmp_path / "g.phf"
    with ReplayWriter(path, LAYOUT, camera="road", source="synthetic") as w:
        for frame_id, sof in [(10, 0), (11, 50_000_000), (13, 150_000_000), (17, 350_000_000)]:
            w.write(frame_id, sof, sof + 8_000_000, frame_bytes(frame_id))
    with ReplayReader(path) as r:
        s = r.summary()
    assert (s["camera"], s["source"], s["frames"], s["first_id"], s["last_id"]) == \
        ("road", "synthetic", 4, 10, 17)
    assert (s["missing_ids"], s["gaps"], s["largest_gap"]) == (4, 2, 3)
    assert s["span_s"] == 0.35 and abs(s["rate_hz"] - 3 / 0.35) < 1e-9
    assert s["interval_ms"] == {"median": 100.0, "max": 200.0}
    assert s["exposure_ms"] == 8.0 and s["file_bytes"] == path.stat().st_size
    assert FrameLayout.from_dict(s["layout"]) == LAYOUT
    one = write(tmp_path / "one.phf", n=1)
    with ReplayReader(one) as r:
        s = r.summary()
    assert (s["frames"], s["span_s"], s["rate_hz"], s["interval_ms"]) == (1, None, None, None)


def test_a_cut_off_recording_is_refused_with_the_way_to_salvage_it(tmp_path):
    path = write(tmp_path / "a.phf")
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ReplayFormatError, match=r"record 2: truncated.*'plugin-host record "
                                                r"--salvage FILE --out NEW' keeps"):
        ReplayReader(path)
    kept = salvage(path, tmp_path / "b.phf")  # the reason it gives does not repeat the hint
    assert "truncated" in kept.reason and "--salvage" not in kept.reason
