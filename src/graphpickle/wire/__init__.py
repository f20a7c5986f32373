"""A framed envelope for graphpickle payloads on sockets and queues.

A message is a list of frames::

    header | pickle | buffer frames ... | signature (if signed)

- The header starts with ``GPKW``, the format version (1 byte), flags (1 byte:
  signed, compressed, split) and three little-endian u32 counts: the length of
  a small JSON document, the number of frames and the number of out-of-band
  buffers. The JSON holds the graphpickle and Python versions, the pickle
  protocol and whether anything was pickled by value. Binary tables follow:
  each frame's length (u64); if compressed, each frame's raw length (u64) and
  codec (u8); if split, each buffer's frame count (u32). Every size is checked
  against the counts and against what arrived before anything is allocated.
- Each out-of-band buffer (protocol 5) travels in its own frame, never copied
  by :func:`pack`: the frame is a view of the buffer. Buffers over
  :data:`MAX_FRAME` bytes (2 GiB) are split and rejoined. Whether a buffer is
  read-only travels in the pickle itself (its ``READONLY_BUFFER`` opcode) and
  the unpickler enforces it; buffers that arrive in immutable memory (a
  ``bytes`` message) load read-only, those read into writable memory
  (:func:`read`, or ``bytearray`` frames) keep the sender's writability.
- Compression (``"lz4"`` or ``"zstd"``, optional extras) is per frame and
  skipped where it does not pay: frames under :data:`COMPRESS_MIN_BYTES`, and
  frames whose first 64 KiB do not shrink below :data:`COMPRESS_MAX_RATIO` of
  their size (nor the whole frame, after compression). Reading never needs a
  compressor unless the sender compressed.
- With a ``key``, an HMAC-SHA256 over the header and *every* frame, buffers
  included, is appended. Given a key, :func:`unpack` and :func:`unpack_bytes`
  verify it before they read any field of the header (the signature is the
  last frame, or the last 32 bytes), in constant time, with any of several keys
  (rotation); :func:`read`, which must find the signature in a stream, reads
  the fixed prefix and the frame-length table first and nothing else before
  the signature is verified.

``unpack(..., allowed=...)`` loads with an allow-list (see
:data:`graphpickle.DATA_ONLY`). Every malformed message raises
:class:`graphpickle.WireFormatError`, every bad signature
:class:`graphpickle.SignatureError`; both are ``UnpicklingError``s.
"""

from __future__ import annotations

import array
import functools
import hashlib
import hmac
import io
import json
import struct
import sys
from collections.abc import Iterable, Sequence
from pickle import PickleBuffer
from typing import IO, Any

from .._version import __version__
from ..core.pickler import DEFAULT_PROTOCOL, Pickler, load_bytes, load_failure
from ..errors import (
    BudgetExceededError,
    PicklingError,
    SignatureError,
    UnpicklingError,
    WireFormatError,
)
from ..restricted.unpickler import compile_allowed
from .frames import buffer_nbytes as _buffer_nbytes
from .frames import frame_table as _frame_table
from .frames import frame_views as _frame_views
from .frames import frames_have_lengths as _frames_have_lengths
from .frames import little_endian

__all__ = [
    "COMPRESS_MAX_RATIO",
    "COMPRESS_MIN_BYTES",
    "DECOMPRESS_FLOOR",
    "DECOMPRESS_RATIO",
    "FRAMES_FLOOR",
    "MAX_DECOMPRESSED",
    "MAX_FRAME",
    "RECEIVED_PER_FRAME",
    "pack",
    "pack_bytes",
    "read",
    "unpack",
    "unpack_bytes",
    "write",
]

Frame = bytes | bytearray | memoryview | PickleBuffer
Keys = bytes | Sequence[bytes] | None

MAGIC = b"GPKW"
FORMAT_VERSION = 1
# magic, format version, flags, JSON length, frame count, buffer count
_PREFIX = struct.Struct("<4sBBIII")
_SIGNED, _COMPRESSED, _SPLIT = 0x01, 0x02, 0x04
_MAX_JSON_BYTES = 64 * 1024
_MAX_FRAMES = 1 << 22
SIGNATURE_BYTES = hashlib.sha256().digest_size
_FLAGS_AT = 5  # the flags byte's offset in the prefix
#: The shortest signed message: a prefix and a signature. Given a key, anything
#: shorter is a format error (it cannot hold a signature), not a signature error.
_MIN_SIGNED = _PREFIX.size + SIGNATURE_BYTES

#: The largest frame; larger buffers are split into several frames.
MAX_FRAME = 2**31 - 1
#: What one message's compressed frames may decompress to, in all, for every
#: receiver in this process that passes no ``max_bytes``: ``None`` (the default)
#: allows :data:`DECOMPRESS_FLOOR` plus :data:`DECOMPRESS_RATIO` times the bytes
#: the message took to receive; a number is a cap of its own (set it once for a
#: service that takes large compressed messages). A header that declares more
#: is refused before anything is decompressed (:class:`BudgetExceededError`).
MAX_DECOMPRESSED: int | None = None
#: What any message may decompress to, however small (by default).
DECOMPRESS_FLOOR = 64 << 20
#: What each byte received may decompress to beyond the floor (by default):
#: compressed numpy arrays of data shrink 1-10x, sparse ones 100-200x (zstd),
#: zeros 250x (lz4) to 26,000x (zstd); see docs/wire.md.
DECOMPRESS_RATIO = 64
#: Frames a message may have, however small: beyond it, one per
#: :data:`RECEIVED_PER_FRAME` bytes received (each frame becomes an object of
#: about 100-200 bytes, from 8 bytes of header for an empty one).
FRAMES_FLOOR = 1 << 16
RECEIVED_PER_FRAME = 32
#: Frames smaller than this are never compressed.
COMPRESS_MIN_BYTES = 4096
#: A frame is kept compressed only if it shrinks below this fraction of its size.
COMPRESS_MAX_RATIO = 0.9
_COMPRESS_SAMPLE = 64 * 1024
_LZ4_MAX_RATIO = 255  # lz4 cannot expand more: a larger claim is a lie
_READ_CHUNK = 64 * 1024 * 1024
_FIRST_READ = 64 * 1024
_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


# --- compression ---------------------------------------------------------------


def _codec(name: str) -> tuple[Any, Any]:
    """``(compress(data), decompress(data, raw_length))`` for a codec name."""
    try:
        if name == "lz4":
            import lz4.block

            return (
                lambda data: lz4.block.compress(data, store_size=False),
                lambda data, n: lz4.block.decompress(
                    data, uncompressed_size=n, return_bytearray=True
                ),
            )
        if name == "zstd":
            import zstandard

            return zstandard.ZstdCompressor(level=3).compress, _zstd_decompress
    except ImportError as exc:
        package = "lz4" if name == "lz4" else "zstandard"
        raise ImportError(
            f"{name} compression needs the {package} package (pip install graphpickle[{name}])"
        ) from exc
    raise ValueError(f"unknown compression {name!r}: use 'lz4', 'zstd' or None")


def _zstd_decompress(data: Frame, raw_length: int) -> bytearray:
    """Decompress in chunks, so that memory grows with the real output, not with
    the size the header or the zstd frame claims."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)))
    out = bytearray()
    while chunk := reader.read(1 << 20):
        out += chunk
        if len(out) > raw_length:
            raise WireFormatError("a zstd frame decompresses past its declared size")
    return out


def _compress(frame: memoryview, compress: Any) -> tuple[Frame, str | None]:
    size = frame.nbytes
    if compress is None or size < COMPRESS_MIN_BYTES:
        return frame, None
    if size > _COMPRESS_SAMPLE:
        sample = compress(frame[:_COMPRESS_SAMPLE])
        if len(sample) > COMPRESS_MAX_RATIO * _COMPRESS_SAMPLE:
            return frame, None
    packed = compress(frame)
    if len(packed) > COMPRESS_MAX_RATIO * size:
        return frame, None
    return packed, compress.codec_name


# --- writing -------------------------------------------------------------------


def pack(
    obj: Any,
    *,
    key: bytes | None = None,
    compression: str | None = None,
    protocol: int = DEFAULT_PROTOCOL,
    deterministic: bool = False,
    pickler_class: type[Pickler] = Pickler,
) -> list[Frame]:
    """Pickle ``obj`` into a list of frames (see the module's docstring).

    Out-of-band buffers are not copied: their frames are the buffers themselves
    (compressed frames excepted), so keep ``obj`` alive while the frames are sent.
    With ``deterministic=True`` the pickle is :mod:`graphpickle.determinism`'s,
    so equal objects give equal messages (the header and signature follow).
    ``pickler_class``: a subclass of :class:`graphpickle.Pickler` that takes its
    arguments, made once for this message (an integration's own reducers).
    """
    compress = None if compression is None else _Compressor(compression)
    buffers: list[PickleBuffer] = []
    out = io.BytesIO()
    pickler = pickler_class(
        out,
        protocol,
        buffer_callback=buffers.append if protocol >= 5 else None,
        deterministic=deterministic,
    )
    pickler.dump(obj)
    payload = out.getbuffer()
    if len(payload) > MAX_FRAME:
        raise PicklingError(
            f"the pickle itself is {len(payload)} bytes, over the {MAX_FRAME}-byte frame limit; "
            "use protocol 5 so that large buffers travel out of band"
        )
    try:
        table, largest = _frame_table(len(payload), buffers)
    except BufferError as exc:
        raise PicklingError(f"an out-of-band buffer is not contiguous: {exc}") from exc
    flags = 0 if key is None else _SIGNED
    frames: list[Frame] = [payload, *buffers]  # the buffers themselves: no copy
    tables: list[bytes | array.array[int]] = [table]
    if largest > MAX_FRAME:
        flags |= _SPLIT
        sizes = _buffer_nbytes(buffers)
        counts = array.array("I", (max(1, -(-n // MAX_FRAME)) for n in sizes))
        raws = [b.raw() for b in buffers]
        frames = [payload, *(r[i : i + MAX_FRAME] for r in raws for i in _starts(len(r)))]
        tables = [array.array("Q", _buffer_nbytes(frames)), counts]
    if compress is not None:
        flags |= _COMPRESSED
        raw_lengths = array.array("Q", _buffer_nbytes(frames))
        packed = [_compress(_bytes_view(f), compress) for f in frames]
        frames = [data for data, _ in packed]
        codecs = array.array("B", [_CODECS.index(codec) for _, codec in packed])
        tables = [array.array("Q", _buffer_nbytes(frames)), raw_lengths, codecs, *tables[1:]]
    document = _document(protocol, pickler.pickled_by_value, _PYTHON)
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, flags, len(document), len(frames), len(buffers))
    header = b"".join([prefix, document, *map(_little_endian, tables)])
    message: list[Frame] = [header, *frames]
    if key is not None:
        message.append(_sign(_check_key(key), message))
    return message


def _bytes_view(frame: Frame) -> memoryview:
    """A flat view of a frame's bytes (a buffer's view may have items of 8 bytes)."""
    return frame.raw() if isinstance(frame, PickleBuffer) else memoryview(frame).cast("B")


def _starts(nbytes: int) -> range:
    return range(0, nbytes, MAX_FRAME) if nbytes else range(1)


def _little_endian(table: bytes | array.array[int]) -> bytes:
    if isinstance(table, bytes):  # from frame_table: little-endian already
        return table
    return little_endian(table)


def pack_bytes(
    obj: Any,
    *,
    key: bytes | None = None,
    compression: str | None = None,
    protocol: int = DEFAULT_PROTOCOL,
    deterministic: bool = False,
    pickler_class: type[Pickler] = Pickler,
) -> bytes:
    """The message of :func:`pack` as one contiguous ``bytes`` (frames back to back)."""
    frames = pack(
        obj,
        key=key,
        compression=compression,
        protocol=protocol,
        deterministic=deterministic,
        pickler_class=pickler_class,
    )
    return b"".join(frames)


def write(
    stream: IO[bytes],
    obj: Any,
    *,
    key: bytes | None = None,
    compression: str | None = None,
    protocol: int = DEFAULT_PROTOCOL,
    deterministic: bool = False,
) -> int:
    """Write the message of ``obj`` to a binary stream (a file, ``socket.makefile("wb")``)
    frame by frame, without joining them; return the number of bytes written.

    The stream is flushed once the message is written (if it has a ``flush``), so
    that a reader on the other end of a buffered socket file gets the whole
    message now, not when the buffer fills or the file is closed.
    """
    written = 0
    frames = pack(
        obj, key=key, compression=compression, protocol=protocol, deterministic=deterministic
    )
    for frame in frames:
        stream.write(frame)
        written += memoryview(frame).nbytes
    flush = getattr(stream, "flush", None)
    if flush is not None:
        flush()
    return written


class _Compressor:
    def __init__(self, name: str) -> None:
        self.codec_name = name
        self._compress, _ = _codec(name)

    def __call__(self, data: memoryview) -> bytes:
        compressed: bytes = self._compress(data)
        return compressed


# --- reading -------------------------------------------------------------------


_CODECS = (None, "lz4", "zstd")


class _Header:
    """A parsed and validated header: the frames' sizes and codecs, the buffers'
    frame counts, and the sender's versions."""

    def __init__(self, prefix: Frame) -> None:
        view = memoryview(prefix)
        if view.nbytes < _PREFIX.size:
            raise WireFormatError("truncated wire message: no complete header")
        magic, version, flags, json_length, n_frames, n_buffers = _PREFIX.unpack_from(view)
        if magic != MAGIC:
            raise WireFormatError("not a graphpickle wire message (bad magic)")
        if version != FORMAT_VERSION:
            raise WireFormatError(
                f"unknown wire format version {version}; this graphpickle reads version {FORMAT_VERSION}"
            )
        if flags & ~(_SIGNED | _COMPRESSED | _SPLIT):
            raise WireFormatError(f"unknown wire flags {flags:#x}")
        if json_length > _MAX_JSON_BYTES or not 1 <= n_frames <= _MAX_FRAMES:
            raise WireFormatError("wire header declares sizes over the limits")
        split = bool(flags & _SPLIT)
        if n_buffers > n_frames - 1 or (not split and n_buffers != n_frames - 1):
            raise WireFormatError("wire header: buffer and frame counts disagree")
        self.flags = flags
        self.signed = bool(flags & _SIGNED)
        self.compressed = bool(flags & _COMPRESSED)
        self.split = split
        self.n_frames, self.n_buffers, self.json_length = n_frames, n_buffers, json_length
        self.size = (
            _PREFIX.size
            + json_length
            + 8 * n_frames
            + (9 * n_frames if self.compressed else 0)
            + (4 * n_buffers if split else 0)
        )

    def read_lengths(self, header: Frame) -> None:
        """Read the frame-length table alone from the whole header frame: what
        :func:`read` needs to find the frames, and the signature, in a stream."""
        view = memoryview(header)
        if view.nbytes != self.size:
            raise WireFormatError(
                f"truncated wire message: the header has {view.nbytes} bytes, not {self.size}"
            )
        self.lengths, _ = _table(view, _PREFIX.size + self.json_length, "Q", self.n_frames)

    def parse(self, header: Frame) -> None:
        """Read the JSON document and the tables from the whole header frame."""
        self.read_lengths(header)
        view = memoryview(header)
        position = _PREFIX.size
        document = _parse_json(bytes(view[position : position + self.json_length]))
        position += self.json_length
        try:
            self.python = _expect(document["python"], str)
            self.protocol = _expect(document["protocol"], int)
            self.by_value = _expect(document["by_value"], bool)
        except (KeyError, TypeError) as exc:
            raise WireFormatError(f"malformed wire header: {exc}") from None
        position += 8 * self.n_frames  # the lengths, read above
        # Read only when the flags say so (no list per frame for the others).
        self.raw_lengths = self.lengths
        self.codecs: list[str | None] = []
        if self.compressed:
            self.raw_lengths, position = _table(view, position, "Q", self.n_frames)
            codes, position = _table(view, position, "B", self.n_frames)
            if any(code >= len(_CODECS) for code in codes):
                raise WireFormatError("wire header names an unknown compression")
            self.codecs = [_CODECS[code] for code in codes]
        self.buffer_frames: list[int] = []
        if self.split:
            counts, position = _table(view, position, "I", self.n_buffers)
            if 0 in counts or sum(counts) != self.n_frames - 1:
                raise WireFormatError("wire header: buffer frame counts do not add up")
            self.buffer_frames = list(counts)
        if self.compressed:  # one loop per frame only when compression already costs more
            for length, raw, codec in zip(self.lengths, self.raw_lengths, self.codecs, strict=True):
                if raw > MAX_FRAME:
                    raise WireFormatError("wire header declares a frame over the size limit")
                if codec is None and length != raw:
                    raise WireFormatError("wire header: an uncompressed frame with two lengths")
                if codec == "lz4" and raw > _LZ4_MAX_RATIO * length + 64:
                    raise WireFormatError("wire header: an lz4 frame cannot expand that much")

    def frame_lengths(self) -> array.array[int]:
        """The lengths of the frames after the header, the signature included."""
        if self.signed:
            return self.lengths + array.array("Q", [SIGNATURE_BYTES])
        return self.lengths


def _table(
    view: memoryview, position: int, typecode: str, count: int
) -> tuple[array.array[int], int]:
    table = array.array(typecode)
    end = position + table.itemsize * count
    table.frombytes(view[position:end])
    if sys.byteorder == "big":
        table.byteswap()
    return table, end


def _expect(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


@functools.lru_cache(maxsize=64)  # senders send the same few documents again and again
def _parse_json(document: bytes) -> Any:
    try:
        parsed = json.loads(document)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ("[" * 60,000 nests)
        raise WireFormatError(f"malformed wire header: {exc}") from None
    if not isinstance(parsed, dict):
        raise WireFormatError("malformed wire header: not an object")
    return parsed


def unpack(
    frames: Iterable[Frame],
    *,
    key: Keys = None,
    allowed: Iterable[str] | None = None,
    max_bytes: int | None = None,
) -> Any:
    """Load the object of a message made by :func:`pack`.

    ``key``: a key, or several (key rotation); when given, the message must be
    signed by one of them. The signature (the last frame) is verified before any
    field of the header is read: a message of fewer than two frames, or whose
    first frame is shorter than the 18-byte prefix, cannot hold a signature and
    raises :class:`WireFormatError`; any other change, to any byte of any frame,
    raises :class:`SignatureError`.
    Without a key, signed and unsigned messages load alike.
    ``allowed``: restricted loading (see :func:`graphpickle.loads`).
    ``max_bytes`` caps what compressed frames decompress to, in all (default
    :data:`MAX_DECOMPRESSED`).
    Out-of-band buffers are the frames themselves, not copies.
    """
    if type(frames) is not list:
        frames = list(frames)
    if not frames:
        raise WireFormatError("empty wire message")
    if key is not None:
        keys = _keys(key)
        try:
            first = memoryview(frames[0]).cast("B")
        except (BufferError, TypeError) as exc:
            raise WireFormatError(f"a frame is not a contiguous buffer: {exc}") from None
        if len(frames) < 2 or first.nbytes < _PREFIX.size:
            raise WireFormatError(
                "truncated wire message: it cannot hold a signature (a signed message is "
                f"a header of {_PREFIX.size} bytes or more, its frames, and a signature frame)"
            )
        _verify(first[_FLAGS_AT], frames[:-1], frames[-1], keys)
    header = _Header(frames[0])
    header.parse(frames[0])
    expected = array.array("Q", [header.size]) + header.frame_lengths()
    if len(frames) != len(expected):
        raise WireFormatError(
            f"wire message has {len(frames) - 1} frames after the header, "
            f"the header declares {len(expected) - 1}"
        )
    try:
        if not _frames_have_lengths(frames, expected):
            raise WireFormatError("a frame's length differs from the header's")
    except (BufferError, TypeError) as exc:
        raise WireFormatError(f"a frame is not a contiguous buffer: {exc}") from None
    return _load(header, frames, 1, allowed, max_bytes, header.size + sum(expected[1:]))


def unpack_bytes(
    data: Frame,
    *,
    key: Keys = None,
    allowed: Iterable[str] | None = None,
    max_bytes: int | None = None,
) -> Any:
    """Load a message made by :func:`pack_bytes` (frames are views into ``data``).

    ``key``: as for :func:`unpack`; the signature is the message's last 32 bytes,
    verified before any field of the header is read. A message shorter than
    50 bytes (the 18-byte prefix and the signature) cannot hold a signature and
    raises :class:`WireFormatError`; any other change or truncation raises
    :class:`SignatureError`. ``max_bytes``: as for :func:`unpack`.
    """
    view = memoryview(data).cast("B")
    if key is not None:  # the signature is the message's last 32 bytes
        keys = _keys(key)
        if view.nbytes < _MIN_SIGNED:
            raise WireFormatError(
                f"truncated wire message: {view.nbytes} bytes cannot hold a signature "
                f"(a signed message has {_MIN_SIGNED} bytes or more)"
            )
        _verify(view[_FLAGS_AT], [view[:-SIGNATURE_BYTES]], view[-SIGNATURE_BYTES:], keys)
    header = _Header(view)
    if view.nbytes < header.size:
        raise WireFormatError("truncated wire message: incomplete header")
    _frames_budget(header, view.nbytes)
    header.parse(view[: header.size])
    lengths = header.frame_lengths()
    frames, end = _frame_views(view, header.size, lengths)
    if len(frames) != len(lengths):
        raise WireFormatError("truncated wire message: a frame is incomplete")
    if end != view.nbytes:
        raise WireFormatError(f"wire message has {view.nbytes - end} bytes after its last frame")
    return _load(header, frames, 0, allowed, max_bytes, view.nbytes)


def read(
    stream: IO[bytes],
    *,
    key: Keys = None,
    allowed: Iterable[str] | None = None,
    max_bytes: int | None = None,
) -> Any:
    """Read one message from a binary stream and load it.

    Each frame is read into memory allocated as its bytes arrive (never sized
    from the header alone), so a lying header cannot make the reader allocate
    more than it receives. ``max_bytes`` caps the declared size of the message,
    and what its compressed frames decompress to (without it, that is capped by
    :data:`MAX_DECOMPRESSED`).
    Buffers are read into writable memory, so they keep the sender's writability.

    ``key``: as for :func:`unpack`. To find the signature in the stream, ``read``
    checks the 18-byte prefix (magic, version, flags, counts) and reads the
    frame-length table before the signature is verified; a change there raises
    :class:`WireFormatError` (or the stream ends early, also a
    :class:`WireFormatError`). The rest of the header (its JSON document, the
    compression and split tables) is read only once the signature is verified:
    a change there, or in any frame or the signature, raises :class:`SignatureError`.
    """
    keys = None if key is None else _keys(key)
    prefix = _read_exactly(stream, _PREFIX.size)
    header = _Header(prefix)
    if keys is not None and not header.signed:  # refused before the rest is read
        _verify(header.flags, [], b"", keys)
    head = prefix + _read_exactly(stream, header.size - _PREFIX.size)
    if keys is None:
        header.parse(head)
    else:
        header.read_lengths(head)  # the rest of the header once the signature is verified
    lengths = header.frame_lengths()
    if max(lengths) > MAX_FRAME:
        raise WireFormatError("wire header declares a frame over the size limit")
    if max_bytes is not None and sum(lengths) > max_bytes:
        raise WireFormatError(
            f"wire message declares {sum(lengths)} bytes, over max_bytes={max_bytes}"
        )
    # (The frames' bytes must arrive before each is made: a lie about their
    # lengths costs the sender the bytes.)
    received = header.size + sum(lengths)
    _frames_budget(header, received)
    frames: list[Frame] = [_read_exactly(stream, n) for n in lengths]
    if keys is not None:
        _verify(header.flags, [head, *frames[:-1]], frames[-1], keys)
        header.parse(head)
    return _load(header, frames, 0, allowed, max_bytes, received)  # read to the declared sizes


def _load(
    header: _Header,
    frames: list[Frame],
    start: int,
    allowed: Iterable[str] | None,
    max_bytes: int | None,
    received: int,
) -> Any:
    """Decompress and unpickle ``frames[start:]`` (the pickle frame first; lengths
    already checked). The buffers are handed over without copying the list.

    What the frames decompress to is capped, in all (``max_bytes``, or
    :data:`MAX_DECOMPRESSED`, or in proportion to the ``received`` bytes),
    before anything is decompressed; each frame is then held to its declared
    size while it decompresses (``_decompress``)."""
    if header.by_value and header.python != _PYTHON:
        raise WireFormatError(
            f"the message holds objects pickled by value under Python {header.python}; "
            f"this is Python {_PYTHON}, and code objects only load on the same minor version"
        )
    end = start + header.n_frames  # a signature, if any, follows: it is not data
    if header.compressed:
        _decompressed_budget(header, max_bytes, received)
        frames = [
            _decompress(frame, raw, codec)
            for frame, raw, codec in zip(
                frames[start:end], header.raw_lengths, header.codecs, strict=True
            )
        ]
        start, end = 0, header.n_frames
    payload = memoryview(frames[start])
    # A slice copies pointers only, and the unpickler takes the next buffer from
    # a list faster than from an islice (40 instructions a buffer, measured).
    buffers = frames[start + 1 : end]
    if header.split:
        buffers = _rejoin(header.buffer_frames, buffers)
    allow_list = None if allowed is None else compile_allowed(allowed)
    try:
        return load_bytes(payload, allow_list, buffers)
    except UnpicklingError:
        raise  # graphpickle's own: a forbidden global
    except Exception as exc:  # the wire's contract: every bad message is an UnpicklingError
        raise UnpicklingError(
            f"cannot load the pickle: {load_failure(exc)}: {type(exc).__name__}: {exc}"
        ) from exc


def _decompressed_budget(header: _Header, max_bytes: int | None, received: int) -> None:
    """What the compressed frames declare they decompress to, in all, against
    the cap: ``max_bytes``, else :data:`MAX_DECOMPRESSED`, else the floor plus
    the ratio times what the message took to receive."""
    if max_bytes is not None:
        cap, why = max_bytes, "max_bytes"
    elif MAX_DECOMPRESSED is not None:
        cap, why = MAX_DECOMPRESSED, "graphpickle.wire.MAX_DECOMPRESSED"
    else:
        cap = DECOMPRESS_FLOOR + DECOMPRESS_RATIO * received
        why = (
            f"{DECOMPRESS_FLOOR:,} + {DECOMPRESS_RATIO} x the {received:,} bytes received; "
            "raise it with max_bytes= or graphpickle.wire.MAX_DECOMPRESSED"
        )
    total = sum(header.raw_lengths)
    if total > cap:
        where = _PREFIX.size + header.json_length + 8 * header.n_frames
        raise BudgetExceededError(
            f"wire message decompresses to {total:,} bytes (its header's table of raw lengths, "
            f"at byte {where}), over the cap of {cap:,} ({why}) (budget 'decompressed')",
            budget="decompressed",
            offset=where,
        )


def _frames_budget(header: _Header, received: int) -> None:
    """A message's frames become objects of 100-200 bytes each, from 8 bytes
    of header for an empty one: past :data:`FRAMES_FLOOR`, each must come with
    :data:`RECEIVED_PER_FRAME` bytes received (refused before any is made)."""
    allowed = max(FRAMES_FLOOR, received // RECEIVED_PER_FRAME)
    if header.n_frames > allowed:
        raise BudgetExceededError(
            f"wire message declares {header.n_frames:,} frames (its header at byte 10) in "
            f"{received:,} bytes: past {FRAMES_FLOOR:,}, a frame needs {RECEIVED_PER_FRAME} "
            "bytes received (graphpickle.wire.FRAMES_FLOOR, RECEIVED_PER_FRAME) (budget 'frames')",
            budget="frames",
            offset=10,
        )


def _read_exactly(stream: IO[bytes], n: int) -> bytearray:
    # Start small and at most double what has arrived: a header that lies about a
    # length costs the reader no more memory than the bytes really sent.
    buffer = bytearray(min(n, _FIRST_READ))
    received = 0
    while received < n:
        if received == len(buffer):
            buffer.extend(bytes(min(n - received, max(received, _FIRST_READ), _READ_CHUNK)))
        with memoryview(buffer) as view:
            count = _read_into(stream, view[received:])
        if not count:
            raise WireFormatError(
                f"truncated wire message: stream ended {n - received} bytes early"
            )
        received += count
    return buffer


def _read_into(stream: IO[bytes], view: memoryview) -> int:
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        return int(readinto(view) or 0)
    chunk = stream.read(view.nbytes)
    view[: len(chunk)] = chunk
    return len(chunk)


def _decompress(frame: Frame, raw_length: int, codec: str | None) -> Frame:
    if codec is None:
        return frame
    try:
        _, decompress = _codec(codec)
        data: bytearray = decompress(frame, raw_length)  # writable, as a received frame
    except WireFormatError:
        raise
    except ImportError as exc:
        raise WireFormatError(f"the message is compressed with {codec}: {exc}") from None
    except Exception as exc:
        raise WireFormatError(
            f"a {codec} frame does not decompress: {type(exc).__name__}: {exc}"
        ) from None
    if len(data) != raw_length:
        raise WireFormatError(
            f"a {codec} frame decompressed to {len(data)} bytes, not {raw_length}"
        )
    return data


def _rejoin(counts: list[int], frames: list[Frame]) -> list[Frame]:
    """Join the frames of each buffer that was split (one copy, unavoidable)."""
    buffers: list[Frame] = []
    position = 0
    for count in counts:
        pieces = frames[position : position + count]
        position += count
        buffers.append(pieces[0] if count == 1 else bytearray().join(pieces))
    return buffers


# --- signatures -----------------------------------------------------------------


def _check_key(key: Any) -> bytes:
    if not isinstance(key, bytes | bytearray) or not key:
        raise TypeError(f"a signing key must be non-empty bytes, got {type(key).__qualname__}")
    return bytes(key)


def _sign(key: bytes, frames: Sequence[Frame]) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for frame in frames:
        mac.update(frame)
    return mac.digest()


def _keys(key: Any) -> list[bytes]:
    """The keys of ``unpack*(..., key=)``: one, or several (rotation)."""
    keys = [key] if isinstance(key, bytes | bytearray) else list(key)
    if not keys:
        raise TypeError("key must be bytes or a non-empty sequence of bytes")
    return [_check_key(k) for k in keys]


def _verify(flags: int, signed_part: Sequence[Frame], signature: Frame, keys: list[bytes]) -> None:
    """Check the HMAC of ``signed_part`` against ``signature``, with each key.

    ``flags`` (not yet verified) only chooses the words of a refusal: it never
    lets a message through.
    """
    if not flags & _SIGNED:
        raise SignatureError(
            "the wire message is not signed (or its flags were changed), and a key is required"
        )
    if memoryview(signature).nbytes != SIGNATURE_BYTES:
        raise SignatureError("the wire message's signature is missing or truncated")
    expected = bytes(signature)
    if not any(hmac.compare_digest(_sign(k, signed_part), expected) for k in keys):
        raise SignatureError(
            "the wire message's signature does not match any key "
            "(the message was changed or cut short, or signed with another key)"
        )


@functools.cache
def _document(protocol: int, by_value: bool, python: str) -> bytes:
    """The header's JSON document (a handful of variants: computed once each)."""
    fields = {
        "graphpickle": __version__,
        "python": python,
        "protocol": protocol,
        "by_value": by_value,
    }
    return json.dumps(fields, separators=(",", ":")).encode()
