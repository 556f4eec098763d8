"""The container: header, signature block, the mapped reader, atomic writes (abi only)."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abi.artifact import (ALIGNMENT, HEADER_SIZE, MAGIC, ArtifactFile, Limits, SignatureEntry,
                          align, atomic_write, create_new, decode_signatures, encode,
                          encode_signatures,
                          file_prefix, layout, parse_header, signed_message)
from abi.errors import ArtifactError, ArtifactFormatError

ROOT = Path(__file__).resolve().parents[3]

KEY_A, KEY_B = "0" * 31 + "a", "1" * 32


def _file(tmp_path, manifest=b"\x80", signatures=(), section=b""):
    block = encode_signatures(signatures)
    path = tmp_path / "x.pha"
    path.write_bytes(file_prefix(manifest, block, len(section)) + section)
    return path


def test_layout_and_header_round_trip():
    h = layout(100, 20, 128)
    assert h.tensor_offset == align(HEADER_SIZE + 120) == 192
    assert h.file_size == 320
    raw = h.pack()
    assert len(raw) == HEADER_SIZE and raw[:8] == MAGIC
    assert parse_header(raw, 320) == h


def test_header_must_match_the_file_size():
    raw = layout(100, 20, 128).pack()
    with pytest.raises(ArtifactFormatError, match="truncated"):
        parse_header(raw, 319)
    with pytest.raises(ArtifactFormatError, match="trailing bytes"):
        parse_header(raw, 321)


def test_header_caps():
    raw = layout(100, 20, 128).pack()
    with pytest.raises(ArtifactFormatError, match="manifest length 100 is outside"):
        parse_header(raw, 320, Limits(max_manifest_bytes=99))
    with pytest.raises(ArtifactFormatError, match="signature block length 20 is outside"):
        parse_header(raw, 320, Limits(max_signature_block_bytes=19))
    with pytest.raises(ArtifactFormatError, match="multiple of 64"):
        parse_header(layout(100, 20, 100).pack(), align(184) + 100)


def test_every_header_bit_is_checked():
    """A flipped header bit is refused here, or it moves the manifest / signature-block
    boundary, which the signature check and the canonical decoder then refuse (the loader
    tests flip every header byte of a real file)."""
    h = layout(100, 20, 128)
    raw = h.pack()
    for i in range(HEADER_SIZE):
        for bit in range(8):
            mutant = bytearray(raw)
            mutant[i] ^= 1 << bit
            try:
                got = parse_header(bytes(mutant), h.file_size)
            except ArtifactFormatError:
                continue
            assert (got.manifest_length, got.signatures_length) != (100, 20), (i, bit)
            assert got.tensor_offset == h.tensor_offset and i in range(16, 32), (i, bit)


def test_signature_block_is_canonical():
    entries = [SignatureEntry(KEY_B, b"\1" * 64), SignatureEntry(KEY_A, b"\2" * 64)]
    block = encode_signatures(entries)
    assert [e.key_id for e in decode_signatures(block)] == [KEY_A, KEY_B]
    with pytest.raises(ArtifactFormatError, match="signs twice"):
        encode_signatures([entries[0], entries[0]])
    for bad, fragment in (
            (encode([{"key_id": KEY_B, "signature": b"\1" * 64},
                     {"key_id": KEY_A, "signature": b"\1" * 64}]), "out of order"),
            (encode([{"key_id": KEY_A, "signature": b"\1" * 64}] * 2), "repeated"),
            (encode([{"key_id": KEY_A.upper(), "signature": b"\1" * 64}]), "lowercase hex"),
            (encode([{"key_id": KEY_A, "signature": b"\1" * 63}]), "64 bytes"),
            (encode([{"key_id": KEY_A, "signature": "x" * 64}]), "64 bytes"),
            (encode([{"key_id": KEY_A, "signature": b"\1" * 64, "x": 1}]), "exactly"),
            (encode({"key_id": KEY_A}), "expected a list"),
            (encode([[]] * 33), "exceed the cap of 32")):
        with pytest.raises(ArtifactFormatError, match=fragment):
            decode_signatures(bad)


def test_signed_message_has_a_context_prefix():
    assert signed_message(b"abc").endswith(b"abc")
    assert signed_message(b"abc") != b"abc"


def test_reader_maps_the_file_and_exposes_unverified_parts(tmp_path):
    section = bytes(range(64)) * 2
    path = _file(tmp_path, manifest=encode({"a": 1}),
                 signatures=[SignatureEntry(KEY_A, b"\3" * 64)], section=section)
    with ArtifactFile(path) as f:
        assert f.unverified_manifest_bytes == encode({"a": 1})
        assert f.unverified_signatures()[0].key_id == KEY_A
        view = f.section()
        assert bytes(view) == section and view.readonly
        view.release()
        assert f.header.tensor_offset % ALIGNMENT == 0


def test_reader_refuses_before_mapping(tmp_path):
    path = tmp_path / "small"
    path.write_bytes(b"x" * 10)
    with pytest.raises(ArtifactFormatError, match="shorter than the 64-byte header"):
        ArtifactFile(path)
    with pytest.raises(ArtifactFormatError, match="file size cap"):
        ArtifactFile(_file(tmp_path), Limits(max_file_bytes=64))
    with pytest.raises(ArtifactError, match="cannot open"):
        ArtifactFile(tmp_path / "missing")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactFormatError, match="not a regular file"):
        ArtifactFile(fifo)


def test_reader_refuses_nonzero_padding_before_the_section(tmp_path):
    path = _file(tmp_path, section=bytes(64))
    data = bytearray(path.read_bytes())
    with ArtifactFile(path) as f:
        assert f.header.tensor_offset > f.header.padding_offset
        last_pad = f.header.tensor_offset - 1
    data[last_pad] = 1
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactFormatError, match="padding"):
        ArtifactFile(path)


@pytest.fixture(params=["unnamed", "named"])
def temporary(request, monkeypatch):
    """atomic_write's temporary file: unnamed while written (O_TMPFILE), or, where a file
    system refuses that, named from the start."""
    if request.param == "named":
        real_open = os.open

        def no_tmpfile(path, flags, *args, **kwargs):
            if flags & os.O_TMPFILE == os.O_TMPFILE:
                raise OSError(errno.EOPNOTSUPP, "Operation not supported")
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", no_tmpfile)
    return request.param


def test_atomic_write_replaces_or_keeps(tmp_path, temporary):
    path = tmp_path / "f"
    atomic_write(path, lambda f: f.write(b"one"), mode=0o640)
    assert path.read_bytes() == b"one" and path.stat().st_mode & 0o777 == 0o640
    atomic_write(path, lambda f: f.write(b"two"))
    assert path.read_bytes() == b"two" and path.stat().st_mode & 0o777 == 0o644

    def fail(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(path, fail)
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


_KILLED_WHILE_WRITING = """\
import sys, time
from abi.artifact import atomic_write, create_new

def write(f):
    f.write(bytes(1 << 20))
    f.flush()
    print("writing", flush=True)
    time.sleep(60)

(create_new if sys.argv[2] == "new" else atomic_write)(sys.argv[1], write)
"""


@pytest.mark.parametrize("how", ["replace", "new"])
def test_a_process_killed_while_writing_leaves_no_temporary_file(tmp_path, how):
    """SIGKILL (or power loss) cannot run a cleanup: the file being written has no name (with
    create_new, not even the one it is to have)."""
    try:
        os.close(os.open(tmp_path, os.O_TMPFILE | os.O_WRONLY, 0o600))
    except OSError as exc:
        pytest.skip(f"no O_TMPFILE on this file system ({exc.strerror}): the temporary file "
                    f"is named")
    if how == "replace":
        (tmp_path / "f").write_bytes(b"old")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WHILE_WRITING, str(tmp_path / "f"),
                             how], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline() == "writing\n"
    finally:
        proc.kill()
        proc.communicate()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["f"] if how == "replace" else [])
    if how == "replace":
        assert (tmp_path / "f").read_bytes() == b"old"


def test_create_new_is_whole_or_nothing_and_never_overwrites(tmp_path, temporary):
    path = tmp_path / "key"

    def fail(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        create_new(path, fail, mode=0o600)
    assert list(tmp_path.iterdir()) == []
    create_new(path, lambda f: f.write(b"secret"), mode=0o600)
    assert path.read_bytes() == b"secret" and path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        create_new(path, lambda f: f.write(b"other"))
    assert path.read_bytes() == b"secret" and [p.name for p in tmp_path.iterdir()] == ["key"]


def test_an_artifact_refusal_names_its_file_once():
    error = ArtifactFormatError("magic is wrong", where="header")
    assert str(error) == "header: magic is wrong"  # no file known yet
    error.path = "/models/a.pha"  # a loader adds it on the way out
    assert str(error) == "/models/a.pha: header: magic is wrong"
    assert error.message == "header: magic is wrong"
    named = ArtifactError("cannot open artifact /models/a.pha: gone", path="/models/a.pha")
    assert str(named) == "cannot open artifact /models/a.pha: gone"
