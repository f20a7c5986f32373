"""A framed envelope for graphpickle payloads on sockets and queues.

A message is a list of frames::

    header | pickle | buffer frames ... | signature (if signed)

- The header is ``GPKW``, the format version (1 byte), flags (1 byte), the
  length of a JSON document (4 bytes, little-endian) and that document: the
  graphpickle and Python versions, the pickle protocol, whether anything was
  pickled by value, each frame's length on the wire, its raw length and its
  compression, and each out-of-band buffer's frame count, size and read-only
  flag. JSON keeps the header readable and its parser safe.
- Each out-of-band buffer (protocol 5) travels in its own frames, never copied
  by :func:`pack`: a frame is a view of the buffer. Buffers over
  :data:`MAX_FRAME` bytes (2 GiB) are split and rejoined.
- Compression (``"lz4"`` or ``"zstd"``, optional extras) is per frame and
  skipped where it does not pay: frames under :data:`COMPRESS_MIN_BYTES`, and
  frames whose first 64 KiB do not shrink below :data:`COMPRESS_MAX_RATIO` of
  their size (nor the whole frame, after compression). Reading never needs a
  compressor unless the sender compressed.
- With a ``key``, an HMAC-SHA256 over the header and *every* frame, buffers
  included, is appended. :func:`unpack` verifies it before anything is
  unpickled, in constant time, with any of several keys (rotation).

``unpack(..., allowed=...)`` loads with an allow-list (see
:data:`graphpickle.DATA_ONLY`). Every malformed message raises
:class:`graphpickle.WireFormatError`, every bad signature
:class:`graphpickle.SignatureError`; both are ``UnpicklingError``s.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import struct
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

from ._pickler import DEFAULT_PROTOCOL, Pickler, loads
from .errors import SignatureError, WireFormatError

__all__ = [
    "COMPRESS_MAX_RATIO",
    "COMPRESS_MIN_BYTES",
    "MAX_FRAME",
    "pack",
    "pack_bytes",
    "read",
    "unpack",
    "unpack_bytes",
    "write",
]

Frame = bytes | bytearray | memoryview
Keys = bytes | Sequence[bytes] | None

MAGIC = b"GPKW"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sBBI")  # magic, format version, flags, header length
_SIGNED = 0x01
_MAX_HEADER_BYTES = 64 * 1024 * 1024
SIGNATURE_BYTES = hashlib.sha256().digest_size

#: The largest frame; larger buffers are split into several frames.
MAX_FRAME = 2**31 - 1
#: Frames smaller than this are never compressed.
COMPRESS_MIN_BYTES = 4096
#: A frame is kept compressed only if it shrinks below this fraction of its size.
COMPRESS_MAX_RATIO = 0.9
_COMPRESS_SAMPLE = 64 * 1024
_LZ4_MAX_RATIO = 255  # lz4 cannot expand more: a larger claim is a lie
_READ_CHUNK = 64 * 1024 * 1024
_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


# --- compression ---------------------------------------------------------------


def _codec(name: str) -> tuple[Any, Any]:
    """``(compress(data), decompress(data, raw_length))`` for a codec name."""
    try:
        if name == "lz4":
            import lz4.block

            return (
                lambda data: lz4.block.compress(data, store_size=False),
                lambda data, n: lz4.block.decompress(data, uncompressed_size=n),
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


def _zstd_decompress(data: Frame, raw_length: int) -> bytes:
    """Decompress in chunks, so that memory grows with the real output, not with
    the size the header or the zstd frame claims."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)))
    out = bytearray()
    while chunk := reader.read(1 << 20):
        out += chunk
        if len(out) > raw_length:
            raise WireFormatError("a zstd frame decompresses past its declared size")
    return bytes(out)


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
) -> list[Frame]:
    """Pickle ``obj`` into a list of frames (see the module's docstring).

    Out-of-band buffers are not copied: their frames are views of the objects'
    memory (compressed frames excepted), so keep ``obj`` alive while the frames
    are being sent.
    """
    compress = None
    if compression is not None:
        compress = _Compressor(compression)
    buffers: list[Any] = []
    out = io.BytesIO()
    pickler = Pickler(out, protocol, buffer_callback=buffers.append if protocol >= 5 else None)
    pickler.dump(obj)

    raw_frames: list[memoryview] = [out.getbuffer()]
    buffer_meta = []
    for buffer in buffers:
        raw = buffer.raw()
        pieces = [raw[i : i + MAX_FRAME] for i in range(0, raw.nbytes, MAX_FRAME)] or [raw]
        buffer_meta.append({"frames": len(pieces), "nbytes": raw.nbytes, "readonly": raw.readonly})
        raw_frames.extend(pieces)

    frames: list[Frame] = []
    frame_meta = []
    for raw in raw_frames:
        data, codec = _compress(raw, compress)
        frames.append(data)
        frame_meta.append([len(data) if codec else raw.nbytes, raw.nbytes, codec])

    document = json.dumps(
        {
            "graphpickle": _graphpickle_version(),
            "python": _PYTHON,
            "protocol": protocol,
            "by_value": pickler.pickled_by_value,
            "frames": frame_meta,
            "buffers": buffer_meta,
        },
        separators=(",", ":"),
    ).encode()
    flags = _SIGNED if key is not None else 0
    header = _PREFIX.pack(MAGIC, FORMAT_VERSION, flags, len(document)) + document
    message: list[Frame] = [header, *frames]
    if key is not None:
        message.append(_sign(_check_key(key), message))
    return message


def pack_bytes(
    obj: Any,
    *,
    key: bytes | None = None,
    compression: str | None = None,
    protocol: int = DEFAULT_PROTOCOL,
) -> bytes:
    """The message of :func:`pack` as one contiguous ``bytes`` (frames back to back)."""
    return b"".join(pack(obj, key=key, compression=compression, protocol=protocol))


def write(
    stream: IO[bytes],
    obj: Any,
    *,
    key: bytes | None = None,
    compression: str | None = None,
    protocol: int = DEFAULT_PROTOCOL,
) -> int:
    """Write the message of ``obj`` to a binary stream (a file, ``socket.makefile("wb")``)
    frame by frame, without joining them; return the number of bytes written."""
    written = 0
    for frame in pack(obj, key=key, compression=compression, protocol=protocol):
        stream.write(frame)
        written += memoryview(frame).nbytes
    return written


class _Compressor:
    def __init__(self, name: str) -> None:
        self.codec_name = name
        self._compress, _ = _codec(name)

    def __call__(self, data: memoryview) -> bytes:
        compressed: bytes = self._compress(data)
        return compressed


# --- reading -------------------------------------------------------------------


class _Header:
    """A parsed and validated header."""

    def __init__(self, flags: int, document: Any) -> None:
        self.signed = bool(flags & _SIGNED)
        try:
            self.python = _expect(document["python"], str)
            self.protocol = _expect(document["protocol"], int)
            self.by_value = _expect(document["by_value"], bool)
            self.frames = [_frame_entry(entry) for entry in _expect(document["frames"], list)]
            self.buffers = [_buffer_entry(entry) for entry in _expect(document["buffers"], list)]
        except (KeyError, TypeError) as exc:
            raise WireFormatError(f"malformed wire header: {exc}") from None
        if not self.frames:
            raise WireFormatError("malformed wire header: no pickle frame")
        if sum(frames for frames, _, _ in self.buffers) != len(self.frames) - 1:
            raise WireFormatError("malformed wire header: buffer and frame counts disagree")

    @property
    def frame_count(self) -> int:
        """Frames after the header, the signature included."""
        return len(self.frames) + (1 if self.signed else 0)

    def frame_lengths(self) -> list[int]:
        lengths = [length for length, _, _ in self.frames]
        return [*lengths, SIGNATURE_BYTES] if self.signed else lengths


def _expect(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _frame_entry(entry: Any) -> tuple[int, int, str | None]:
    if len(_expect(entry, list)) != 3:
        raise TypeError("a frame entry has three fields")
    length, raw_length, codec = entry
    for n in (length, raw_length):
        if type(n) is not int or not 0 <= n <= MAX_FRAME:
            raise TypeError(f"bad frame length {n!r}")
    if codec not in (None, "lz4", "zstd"):
        raise TypeError(f"unknown compression {codec!r}")
    if codec is None and length != raw_length:
        raise TypeError("an uncompressed frame with two lengths")
    if codec == "lz4" and raw_length > _LZ4_MAX_RATIO * length + 64:
        raise TypeError("an lz4 frame cannot expand that much")
    return length, raw_length, codec


def _buffer_entry(entry: Any) -> tuple[int, int, bool]:
    entry = _expect(entry, dict)
    frames = _expect(entry["frames"], int)
    nbytes = _expect(entry["nbytes"], int)
    readonly = _expect(entry["readonly"], bool)
    if frames < 1 or nbytes < 0:
        raise TypeError("bad buffer entry")
    return frames, nbytes, readonly


def _parse_prefix(prefix: Frame) -> tuple[int, int]:
    """``(flags, header length)`` from the fixed-size start of a message."""
    if memoryview(prefix).nbytes < _PREFIX.size:
        raise WireFormatError("truncated wire message: no complete header")
    magic, version, flags, length = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise WireFormatError("not a graphpickle wire message (bad magic)")
    if flags & ~_SIGNED:
        raise WireFormatError(f"unknown wire flags {flags:#x}")
    if version != FORMAT_VERSION:
        raise WireFormatError(
            f"unknown wire format version {version}; this graphpickle reads version {FORMAT_VERSION}"
        )
    if length > _MAX_HEADER_BYTES:
        raise WireFormatError(f"wire header claims {length} bytes, over the limit")
    return flags, length


def _parse_header(flags: int, document: Frame) -> _Header:
    try:
        parsed = json.loads(bytes(document))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireFormatError(f"malformed wire header: {exc}") from None
    if not isinstance(parsed, dict):
        raise WireFormatError("malformed wire header: not an object")
    return _Header(flags, parsed)


def unpack(
    frames: Iterable[Frame],
    *,
    key: Keys = None,
    allowed: Iterable[str] | None = None,
) -> Any:
    """Load the object of a message made by :func:`pack`.

    ``key``: a key, or several (key rotation); when given, the message must be
    signed by one of them, and the signature is checked first, before even the
    header is read, so any change to any frame is a :class:`SignatureError`.
    Without a key, signed and unsigned messages load alike.
    ``allowed``: restricted loading (see :func:`graphpickle.loads`).
    Buffers are views of the frames when the frames are writable or the buffer
    was read-only; otherwise (a writable buffer in ``bytes``) they are copied.
    """
    frames = list(frames)
    if not frames:
        raise WireFormatError("empty wire message")
    head = memoryview(frames[0])
    flags, length = _parse_prefix(head)
    if key is not None:
        _verify(flags, frames[:-1], frames[-1], key)
    if head.nbytes != _PREFIX.size + length:
        raise WireFormatError("truncated wire message: header frame has the wrong length")
    header = _parse_header(flags, head[_PREFIX.size :])
    if len(frames) - 1 != header.frame_count:
        raise WireFormatError(
            f"wire message has {len(frames) - 1} frames after the header, "
            f"the header declares {header.frame_count}"
        )
    for i, (frame, declared) in enumerate(zip(frames[1:], header.frame_lengths(), strict=True)):
        if memoryview(frame).nbytes != declared:
            raise WireFormatError(f"frame {i} has {memoryview(frame).nbytes} bytes, not {declared}")
    return _load(header, frames[1:], allowed)


def unpack_bytes(data: Frame, *, key: Keys = None, allowed: Iterable[str] | None = None) -> Any:
    """Load a message made by :func:`pack_bytes` (views into ``data``, no copy)."""
    view = memoryview(data).cast("B")
    flags, length = _parse_prefix(view)
    if key is not None:  # the signature is the message's last 32 bytes
        _verify(flags, [view[:-SIGNATURE_BYTES]], view[-SIGNATURE_BYTES:], key)
    end = _PREFIX.size + length
    if view.nbytes < end:
        raise WireFormatError("truncated wire message: incomplete header")
    header = _parse_header(flags, view[_PREFIX.size : end])
    frames: list[Frame] = []
    for declared in header.frame_lengths():
        if view.nbytes < end + declared:
            raise WireFormatError("truncated wire message: a frame is incomplete")
        frames.append(view[end : end + declared])
        end += declared
    if end != view.nbytes:
        raise WireFormatError(f"wire message has {view.nbytes - end} bytes after its last frame")
    return _load(header, frames, allowed)


def _load(header: _Header, frames: list[Frame], allowed: Iterable[str] | None) -> Any:
    """Decompress and unpickle the frames after the header (lengths checked)."""
    if header.by_value and header.python != _PYTHON:
        raise WireFormatError(
            f"the message holds objects pickled by value under Python {header.python}; "
            f"this is Python {_PYTHON}, and code objects only load on the same minor version"
        )
    payload, *buffer_frames = (
        _decompress(frame, entry) for frame, entry in zip(frames, header.frames, strict=False)
    )
    return loads(payload, buffers=_rejoin(header, buffer_frames), allowed=allowed)


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
    more than it receives. ``max_bytes`` caps the declared size of the message.
    """
    prefix = _read_exactly(stream, _PREFIX.size)
    flags, length = _parse_prefix(prefix)
    document = _read_exactly(stream, length)
    header = _parse_header(flags, document)
    lengths = header.frame_lengths()
    if max_bytes is not None and sum(lengths) > max_bytes:
        raise WireFormatError(
            f"wire message declares {sum(lengths)} bytes, over max_bytes={max_bytes}"
        )
    frames: list[Frame] = [prefix + document]
    frames.extend(_read_exactly(stream, n) for n in lengths)
    return unpack(frames, key=key, allowed=allowed)


def _read_exactly(stream: IO[bytes], n: int) -> bytearray:
    buffer = bytearray(min(n, _READ_CHUNK))
    received = 0
    while received < n:
        if received == len(buffer):  # grow only as data keeps arriving
            buffer.extend(bytes(min(n - received, _READ_CHUNK)))
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


def _decompress(frame: Frame, entry: tuple[int, int, str | None]) -> Frame:
    _, raw_length, codec = entry
    if codec is None:
        return frame
    try:
        _, decompress = _codec(codec)
        data: bytes = decompress(frame, raw_length)
    except WireFormatError:
        raise
    except ImportError as exc:
        raise WireFormatError(f"the message is compressed with {codec}: {exc}") from None
    except Exception as exc:
        raise WireFormatError(f"a {codec} frame does not decompress: {exc}") from None
    if len(data) != raw_length:
        raise WireFormatError(
            f"a {codec} frame decompressed to {len(data)} bytes, not {raw_length}"
        )
    return data


def _rejoin(header: _Header, frames: list[Frame]) -> list[memoryview]:
    """One buffer per out-of-band buffer: a view of its frame, or its frames joined."""
    buffers = []
    position = 0
    for count, nbytes, readonly in header.buffers:
        pieces = frames[position : position + count]
        position += count
        if sum(memoryview(p).nbytes for p in pieces) != nbytes:
            raise WireFormatError("a buffer's frames do not add up to its declared size")
        view = memoryview(pieces[0]) if count == 1 else memoryview(bytearray().join(pieces))
        if readonly:
            view = view.toreadonly()
        elif view.readonly:  # writable on the sender: give the receiver writable memory
            view = memoryview(bytearray(view))
        buffers.append(view.cast("B"))
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


def _verify(flags: int, signed_part: Sequence[Frame], signature: Frame, key: Any) -> None:
    """Check the HMAC of ``signed_part`` against ``signature``, with each key."""
    keys = [key] if isinstance(key, bytes | bytearray) else list(key)
    if not keys:
        raise TypeError("key must be bytes or a non-empty sequence of bytes")
    if not flags & _SIGNED:
        raise SignatureError("the wire message is not signed, and a key is required")
    if not signed_part or memoryview(signature).nbytes != SIGNATURE_BYTES:
        raise SignatureError("the wire message's signature is missing or truncated")
    expected = bytes(signature)
    if not any(hmac.compare_digest(_sign(_check_key(k), signed_part), expected) for k in keys):
        raise SignatureError(
            "the wire message's signature does not match any key (or the message was cut short)"
        )


def _graphpickle_version() -> str:
    from . import __version__

    return __version__
