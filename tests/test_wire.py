"""graphpickle.wire: frames, compression, signatures, restricted loading, bad input."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import pickle
import socket
import struct
import threading
import tracemalloc

import numpy as np
import pytest
from conftest import asks_for_a_huge_memo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle import wire

KEY = b"secret key"


def sample():
    return {
        "arrays": [np.arange(10_000, dtype="f8"), np.zeros((100, 100))],
        "readonly": np.frombuffer(b"x" * 5000, dtype="u1"),
        "task": (lambda x: x + 1, 41),
        "text": "__main__" * 100,
    }


def check(loaded) -> None:
    np.testing.assert_array_equal(loaded["arrays"][0], np.arange(10_000, dtype="f8"))
    assert loaded["arrays"][1].shape == (100, 100)
    assert not loaded["readonly"].flags.writeable
    assert loaded["task"][0](loaded["task"][1]) == 42
    assert loaded["text"] == "__main__" * 100


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("key", [None, KEY])
def test_round_trips(compression, key):
    obj = sample()
    check(wire.unpack(wire.pack(obj, key=key, compression=compression), key=key))
    loaded = wire.unpack_bytes(wire.pack_bytes(obj, key=key, compression=compression), key=key)
    np.testing.assert_array_equal(loaded["arrays"][0], obj["arrays"][0])
    stream = io.BytesIO()
    written = wire.write(stream, obj, key=key, compression=compression)
    assert written == len(stream.getvalue())
    stream.seek(0)
    check(wire.read(stream, key=key))


def test_protocol_4_has_no_buffer_frames():
    frames = wire.pack([np.arange(100)], protocol=4)
    assert len(frames) == 2  # header and pickle: buffers in band
    np.testing.assert_array_equal(wire.unpack(frames)[0], np.arange(100))


def test_pack_does_not_copy_buffers_and_unpack_gives_views():
    array = np.arange(100_000, dtype="f8")
    frames = wire.pack([array])
    assert len(frames) == 3
    assert np.shares_memory(np.frombuffer(frames[2], dtype="f8"), array)
    received = [bytes(f) for f in frames[:2]] + [bytearray(frames[2])]  # as a socket would
    (loaded,) = wire.unpack(received)
    assert np.shares_memory(loaded, np.frombuffer(received[2], dtype="f8"))
    assert loaded.flags.writeable


def test_readonly_stays_readonly_and_writable_memory_stays_writable():
    writable, readonly = np.arange(10), np.arange(10)
    readonly.flags.writeable = False
    frames = wire.pack([writable, readonly])
    a, b = wire.unpack([bytes(frames[0]), bytes(frames[1]), *map(bytearray, frames[2:])])
    assert a.flags.writeable and not b.flags.writeable  # READONLY_BUFFER is enforced
    # From an immutable message (bytes) every buffer loads read-only: no silent copy.
    a, b = wire.unpack_bytes(wire.pack_bytes([writable, readonly]))
    assert not a.flags.writeable and not b.flags.writeable
    stream = io.BytesIO(wire.pack_bytes([writable, readonly]))
    a, b = wire.read(stream)  # read into fresh, writable memory
    assert a.flags.writeable and not b.flags.writeable


def _layout(message: bytes) -> tuple[int, int, int, int]:
    """(flags, offset of the tables, frame count, buffer count) of a message."""
    _, _, flags, json_length, n_frames, n_buffers = struct.unpack_from("<4sBBIII", message)
    return flags, 18 + json_length, n_frames, n_buffers


def _set_u64(message: bytes, offset: int, value: int) -> bytes:
    return message[:offset] + struct.pack("<Q", value) + message[offset + 8 :]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_large_buffers_are_split_and_rejoined(monkeypatch, compression):
    monkeypatch.setattr(wire, "MAX_FRAME", 1000)
    array = np.arange(2_000, dtype="f8")  # 16,000 bytes: 16 frames
    frames = wire.pack([array, np.arange(3), b""], compression=compression)
    flags, _, n_frames, n_buffers = _layout(bytes(frames[0]))
    assert flags & 0x04 and n_buffers == 2 and n_frames == 1 + 16 + 1
    loaded = wire.unpack_bytes(b"".join(frames))
    np.testing.assert_array_equal(loaded[0], array)
    np.testing.assert_array_equal(loaded[1], np.arange(3))


def test_compression_is_skipped_where_it_does_not_pay():
    rng = np.random.default_rng(0)
    obj = [np.zeros(100_000), rng.random(100_000), np.zeros(10)]
    head = bytes(wire.pack(obj, compression="zstd")[0])
    _, offset, n_frames, _ = _layout(head)
    codecs = head[offset + 16 * n_frames : offset + 17 * n_frames]
    assert list(codecs[1:]) == [2, 0, 0]  # zeros: zstd; random: no; too small: no
    with pytest.raises(ValueError, match="unknown compression"):
        wire.pack(obj, compression="gzip")


def test_compression_judges_bytes_not_items():
    # The sample is 64 KiB of bytes whatever the buffer's item size: a float64
    # array that lz4 shrinks to a third is compressed.
    head = bytes(wire.pack([np.arange(200_000, dtype="f8")], compression="lz4")[0])
    _, offset, n_frames, _ = _layout(head)
    assert head[offset + 16 * n_frames + 1] == 1  # lz4


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_decompressed_buffers_are_writable_memory(compression):
    array = np.zeros(100_000)
    loaded = wire.read(io.BytesIO(wire.pack_bytes([array], compression=compression)))[0]
    assert loaded.flags.writeable
    np.testing.assert_array_equal(loaded, array)


def test_a_pickle_over_the_frame_limit_is_refused(monkeypatch):
    monkeypatch.setattr(wire, "MAX_FRAME", 1000)
    with pytest.raises(graphpickle.PicklingError, match="frame limit"):
        wire.pack(list(range(1000)))


def test_builtin_types_are_not_by_value():
    import types

    header = bytes(wire.pack([types.FunctionType, types.CodeType])[0])
    assert _document(header)["by_value"] is False


def test_signature_checks():
    obj = {"a": np.arange(1000)}
    frames = wire.pack(obj, key=KEY)
    assert wire.unpack(frames, key=[b"old key", KEY])["a"].sum() == sum(range(1000))
    assert wire.unpack(frames)["a"].size == 1000  # no key: not verified
    with pytest.raises(graphpickle.SignatureError, match="does not match"):
        wire.unpack(frames, key=b"other")
    with pytest.raises(graphpickle.SignatureError):
        wire.unpack(frames[:-1], key=KEY)  # the signature frame dropped
    with pytest.raises(graphpickle.SignatureError, match="missing or truncated"):
        wire.unpack([*frames[:-1], frames[-1][:10]], key=KEY)
    with pytest.raises(graphpickle.WireFormatError, match="cannot hold a signature"):
        wire.unpack(frames[:1], key=KEY)  # one frame: no room for a signature
    with pytest.raises(graphpickle.SignatureError, match="not signed"):
        wire.unpack(wire.pack(obj), key=KEY)
    with pytest.raises(graphpickle.SignatureError, match="not signed"):
        wire.read(io.BytesIO(wire.pack_bytes(obj)), key=KEY)
    message = wire.pack_bytes(obj, key=KEY)
    with pytest.raises(graphpickle.SignatureError, match="cut short"):
        wire.unpack_bytes(message[:-5], key=KEY)
    with pytest.raises(TypeError, match="non-empty"):
        wire.unpack_bytes(message, key=[])


# A signed message is checked before any of its header is trusted. What
# unpack and unpack_bytes need to find the signature is where the message ends
# (the last frame, the last 32 bytes): every changed or missing byte of a message
# long enough to hold a prefix and a signature (50 bytes) is a SignatureError.
# read must find the frames in a stream through the prefix and the frame-length
# table: changes there may be WireFormatErrors; the rest are SignatureErrors.
_SIGNED = wire.pack_bytes({"a": np.arange(300), "b": "x" * 100}, key=KEY, compression="zstd")
_PREFIX_BYTES, _MIN_SIGNED = 18, 50


def _signed_layout() -> tuple[int, int, int, int]:
    """(end of the JSON document, end of the header, end of the frames) of _SIGNED, and
    the end of its frame-length table."""
    _, tables, n_frames, _ = _layout(_SIGNED)
    header_end = tables + 17 * n_frames
    return tables, header_end, len(_SIGNED) - 32, tables + 8 * n_frames


def _changed(message: bytes, position: int) -> bytes:
    changed = bytearray(message)
    changed[position] ^= 0x01
    return bytes(changed)


def _as_frames(message: bytes) -> list[bytes]:
    """The frames of a message of _SIGNED's layout, cut where the original's are."""
    _, header_end, body_end, _ = _signed_layout()
    frames = wire.pack({"a": np.arange(300), "b": "x" * 100}, key=KEY, compression="zstd")
    cuts = list(itertools.accumulate(memoryview(f).nbytes for f in frames))
    assert cuts[0] == header_end and cuts[-1] == len(message) and cuts[-2] == body_end
    return [message[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True)]


def test_a_signed_message_too_short_to_hold_a_signature_is_a_format_error():
    for length in (0, 5, _PREFIX_BYTES, _MIN_SIGNED - 1):
        with pytest.raises(graphpickle.WireFormatError, match="cannot hold a signature"):
            wire.unpack_bytes(_SIGNED[:length], key=KEY)
    with pytest.raises(graphpickle.WireFormatError, match="cannot hold a signature"):
        wire.unpack([_SIGNED[: _PREFIX_BYTES - 1], _SIGNED[-32:]], key=KEY)
    with pytest.raises(graphpickle.WireFormatError, match="truncated"):
        wire.read(io.BytesIO(_SIGNED[: _PREFIX_BYTES - 1]), key=KEY)


def test_a_truncated_signed_message_is_a_signature_error():
    for length in (_MIN_SIGNED, _MIN_SIGNED + 10, len(_SIGNED) // 2, len(_SIGNED) - 1):
        with pytest.raises(graphpickle.SignatureError):
            wire.unpack_bytes(_SIGNED[:length], key=KEY)
    frames = _as_frames(_SIGNED)
    with pytest.raises(graphpickle.SignatureError, match="missing or truncated"):
        wire.unpack([*frames[:-1], frames[-1][:-1]], key=KEY)
    # A stream that ends early is a truncated stream: found before any signature.
    with pytest.raises(graphpickle.WireFormatError, match="stream ended"):
        wire.read(io.BytesIO(_SIGNED[:-1]), key=KEY)


@pytest.mark.parametrize("where", ["header", "body", "signature"])
def test_every_changed_byte_of_a_signed_message_is_a_signature_error(where):
    tables, header_end, body_end, lengths_end = _signed_layout()
    positions = {
        "header": range(header_end),
        "body": range(header_end, body_end),
        "signature": range(body_end, len(_SIGNED)),
    }[where]
    assert len(positions) > 30
    for position in positions:
        changed = _changed(_SIGNED, position)
        with pytest.raises(graphpickle.SignatureError):
            wire.unpack_bytes(changed, key=KEY)
        with pytest.raises(graphpickle.SignatureError):
            wire.unpack(_as_frames(changed), key=KEY)
        if _PREFIX_BYTES <= position < tables or position >= lengths_end:
            # Neither the prefix nor the frame-length table: read verifies first.
            with pytest.raises(graphpickle.SignatureError):
                wire.read(io.BytesIO(changed), key=KEY)
        else:  # what read needs to find the frames: never loaded, either way
            with pytest.raises((graphpickle.WireFormatError, graphpickle.SignatureError)):
                wire.read(io.BytesIO(changed), key=KEY)
    assert wire.unpack_bytes(_SIGNED, key=KEY)["b"] == "x" * 100


def test_every_frame_is_signed():
    frames = [bytearray(f) for f in wire.pack({"a": np.arange(1000)}, key=KEY)]
    for index in range(len(frames) - 1):
        tampered = [bytearray(f) for f in frames]
        tampered[index][-1] ^= 1
        with pytest.raises(graphpickle.SignatureError):
            wire.unpack(tampered, key=KEY)


def test_restricted_unpack():
    data = {"a": np.arange(3), "when": "now"}
    assert wire.unpack(wire.pack(data), allowed=graphpickle.DATA_ONLY)["when"] == "now"
    with pytest.raises(graphpickle.ForbiddenGlobalError, match="pickled by value"):
        wire.unpack(wire.pack({"f": lambda: 1}), allowed=graphpickle.DATA_ONLY)


def test_write_flushes_a_buffered_socket_file():
    # A small message stays in a BufferedWriter's buffer unless write flushes it:
    # the reader would then wait until the writer is closed. The socket's timeout
    # makes that a TimeoutError, not a hang.
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(20)
        writer, reader = left.makefile("wb"), right.makefile("rb")
        with writer, reader:
            assert isinstance(writer, io.BufferedWriter)
            for obj in ({"a": [1, 2, 3]}, {"b": np.arange(10)}):
                written = wire.write(writer, obj, key=KEY)
                assert written < io.DEFAULT_BUFFER_SIZE  # would fit in the buffer
                assert repr(wire.read(reader, key=KEY)) == repr(obj)


def test_write_flushes_a_large_message_while_the_writer_stays_open():
    left, right = socket.socketpair()
    done = threading.Event()
    errors: list[BaseException] = []

    def send() -> None:
        try:
            with left.makefile("wb") as writer:
                wire.write(writer, sample(), key=KEY, compression="lz4")
                wire.write(writer, "last", key=KEY)
                done.wait(30)  # open until the reader has both messages
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    with left, right:
        right.settimeout(20)
        sender = threading.Thread(target=send)
        sender.start()
        try:
            with right.makefile("rb") as reader:
                check(wire.read(reader, key=KEY))
                assert wire.read(reader, key=KEY) == "last"
        finally:
            done.set()
            sender.join(30)
    assert not errors


def test_socket_round_trip():
    left, right = socket.socketpair()
    with left, right:
        sender = threading.Thread(
            target=lambda: wire.write(left.makefile("wb"), sample(), key=KEY, compression="lz4")
        )
        sender.start()
        check(wire.read(right.makefile("rb"), key=KEY))
        sender.join()


def _document(message: bytes) -> dict:
    json_length = struct.unpack_from("<I", message, 6)[0]
    return json.loads(message[18 : 18 + json_length])


def test_python_version_of_by_value_payloads_is_checked(monkeypatch):
    monkeypatch.setattr(wire, "_PYTHON", "3.99")  # the sender's Python
    by_value = wire.pack_bytes({"f": lambda: 1})
    plain = wire.pack_bytes({"a": [1, 2]})
    monkeypatch.undo()
    assert _document(by_value)["by_value"] is True
    assert _document(plain) == {**_document(plain), "python": "3.99", "by_value": False}
    with pytest.raises(graphpickle.WireFormatError, match=r"Python 3\.99"):
        wire.unpack_bytes(by_value)
    assert wire.unpack_bytes(plain) == {"a": [1, 2]}  # plain data loads anywhere


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda m: b"XXXX" + m[4:], "bad magic"),
        (lambda m: m[:4] + b"\x07" + m[5:], "unknown wire format version 7"),
        (lambda m: m[:5] + b"\x80" + m[5:], "unknown wire flags"),
        (lambda m: m[:6] + struct.pack("<I", 2**30) + m[10:], "over the limits"),
        (lambda m: m[:10] + struct.pack("<I", 2**31) + m[14:], "over the limits"),
        (lambda m: m[:14] + struct.pack("<I", 5) + m[18:], "counts disagree"),
        (lambda m: m[:20], "truncated"),
        (lambda m: m + b"extra", "after its last frame"),
        (lambda m: b"", "truncated"),
    ],
)
def test_malformed_messages(mutate, fragment):
    message = wire.pack_bytes({"a": np.arange(100)})
    with pytest.raises(graphpickle.WireFormatError, match=fragment):
        wire.unpack_bytes(mutate(message))


def test_lying_lengths_allocate_nothing_large():
    message = wire.pack_bytes({"a": np.arange(100)})
    _, offset, _, _ = _layout(message)
    lying = _set_u64(message, offset + 8, 2**31 - 1)  # the buffer frame claims 2 GiB
    tracemalloc.start()
    try:
        with pytest.raises(graphpickle.WireFormatError):
            wire.unpack_bytes(lying)
        with pytest.raises(graphpickle.WireFormatError, match="stream ended"):
            wire.read(io.BytesIO(lying))
        with pytest.raises(graphpickle.WireFormatError, match="max_bytes"):
            wire.read(io.BytesIO(lying), max_bytes=10_000)
        assert tracemalloc.get_traced_memory()[1] < 4 * 1024 * 1024
    finally:
        tracemalloc.stop()


def test_lz4_frames_cannot_claim_huge_expansion():
    message = wire.pack_bytes([np.zeros(100_000)], compression="lz4")
    _, offset, n_frames, _ = _layout(message)
    lying = _set_u64(message, offset + 8 * n_frames + 8, 2**31 - 1)  # raw length of frame 1
    with pytest.raises(graphpickle.WireFormatError, match="expand"):
        wire.unpack_bytes(lying)


# A changed message of numpy data is loaded as messages from an untrusted peer
# must be: signed (the signature refuses the change) or restricted
# (allowed=DATA_ONLY). Loaded without either, a changed numpy dtype's flags make
# numpy free plain numbers as objects, and the process crashes, as it would with
# plain pickle: unpickling untrusted data is that unsafe. Messages of builtin
# data are loaded unrestricted too: on those the C unpickler must never crash.
MESSAGES = [
    wire.pack_bytes({"a": np.arange(50), "b": "x"}),
    wire.pack_bytes({"a": np.zeros(5000), "f": len}, key=KEY, compression="lz4"),
    wire.pack_bytes([np.zeros(3000), "y" * 100], compression="zstd"),
]
PLAIN_MESSAGES = [
    wire.pack_bytes({"a": bytearray(b"x" * 300), "b": ("y", 1.5, None), "c": [b"z" * 50]}),
    wire.pack_bytes([pickle.PickleBuffer(bytearray(4000)), "q" * 100], key=KEY, compression="lz4"),
    wire.pack_bytes({"k": list(range(100)), "s": {1, 2, 3}}, compression="zstd"),
]


def _loads_quietly(data: bytes, key, allowed=None) -> None:
    if allowed is None and key is None and asks_for_a_huge_memo(data):
        return  # pickle's own memory bomb (see conftest): not loaded unrestricted
    with contextlib.suppress(graphpickle.UnpicklingError):
        wire.unpack_bytes(data, key=key, allowed=allowed)


def _mutated(message: bytes, edits, cut) -> bytes:
    changed = bytearray(message)
    for position, value in edits:
        changed[position % len(changed)] = value
    return bytes(changed[: len(changed) - cut])


_EDITS = st.lists(st.tuples(st.integers(0, 100_000), st.integers(0, 255)), min_size=1, max_size=6)


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(MESSAGES) - 1),
    edits=_EDITS,
    cut=st.integers(0, 40),
    keyed=st.booleans(),
)
def test_fuzz_mutated_messages(which, edits, cut, keyed):
    data = _mutated(MESSAGES[which], edits, cut)
    if keyed:
        _loads_quietly(data, KEY)
    else:
        _loads_quietly(data, None, allowed=graphpickle.DATA_ONLY)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(PLAIN_MESSAGES) - 1),
    edits=_EDITS,
    cut=st.integers(0, 40),
    keyed=st.booleans(),
)
def test_fuzz_mutated_messages_of_builtin_data(which, edits, cut, keyed):
    _loads_quietly(_mutated(PLAIN_MESSAGES[which], edits, cut), KEY if keyed else None)


@settings(max_examples=4000, deadline=None)
@given(data=st.binary(max_size=300), prefix=st.booleans())
def test_fuzz_random_messages(data, prefix):
    head = MESSAGES[0][:10] if prefix else b""
    _loads_quietly(head + data, None)
