"""The reference cache's entry format: an Expected as a JSON header and its arrays' raw bytes, deflated with a
preset dictionary.

An entry is data, never a pickle: a cache file is data, and reading it runs no code.

Encodes and decodes one entry; never opens the cache, and never unpickles.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib

import numpy as np

from conformance.core.model import Expected

# Entries are deflated with a preset dictionary of what every header repeats (field and rule names):
# a small case's entry shrinks to a fraction of its size, so the exhaustive suite fits the cap.
_RULE_NAMES = ("pointwise.formula", "pointwise.conventions.target_zero", "pointwise.conventions.target_negative",
               "pointwise.conventions.log_target_neg_inf", "pointwise.conventions.nan_propagation",
               "pointwise.conventions.infinities", "gradients.formula", "gradients.conventions.target_zero",
               "gradients.conventions.target_negative", "gradients.conventions.log_target_neg_inf",
               "gradients.conventions.infinite_input", "gradients.conventions.nan_propagation", "dialects.keras.clip",
               "dialects.keras.ratio", "errors.incompatible_shapes", "errors.unknown_reduction", "shapes.broadcasting")
_ZDICT = json.dumps([{"result_dtype": dtype, "shape": [4, 6], "value": ["<f8", [4, 6], 0, 192],
                      "bound": ["<f8", [4, 6], 192, 192], "error_id": None, "error_type": None, "error_match": None,
                      "warnings": [], "rules": [], "rule_map": ["|i1", [4, 6], 384, 24], "rule_names": list(_RULE_NAMES)}
                     for dtype in ("float64", "float32", "float16", "bfloat16")]).encode()
# A window just large enough to hold the dictionary, and little memory: a stream is set up for every entry,
# and a smaller one is cheaper to set up.
_WBITS, _MEMLEVEL = 13, 2
_DEFLATE = zlib.compressobj(1, zlib.DEFLATED, _WBITS, _MEMLEVEL, zlib.Z_DEFAULT_STRATEGY, _ZDICT)
_INFLATE = zlib.decompressobj(_WBITS, _ZDICT)


def pack(blob: bytes) -> bytes:
    """An encoded entry, deflated with the preset dictionary."""
    stream = _DEFLATE.copy()
    return stream.compress(blob) + stream.flush()


def unpack(stored: bytes) -> bytes:
    """The encoded entry that `pack` deflated; zlib.error where it is damaged."""
    stream = _INFLATE.copy()
    blob = stream.decompress(stored) + stream.flush()
    if not stream.eof:
        raise zlib.error("truncated entry")
    return blob


_ARRAY_FIELDS = ("value", "bound", "rule_map", "alternate")
_EXPECTED_FIELDS = tuple(f.name for f in dataclasses.fields(Expected))
_ARRAY_DTYPES = ("<f8", "|i1")  # float64 values and bounds, int8 rule codes


def encode(expected: Expected) -> bytes:
    """An Expected as a JSON header (its plain fields, and where each array lies) and the arrays' bytes."""
    header, chunks, offset = {}, [], 0
    for f in dataclasses.fields(expected):
        value = getattr(expected, f.name)
        if f.name in _ARRAY_FIELDS:
            if value is None:
                header[f.name] = None
                continue
            array = np.asarray(value)  # tobytes() writes C order; ascontiguousarray would make 0-d arrays 1-d
            if array.dtype.str not in _ARRAY_DTYPES:
                array = array.astype(np.float64)
            header[f.name] = [array.dtype.str, list(array.shape), offset, array.nbytes]
            chunks.append(array.tobytes())
            offset += array.nbytes
        else:
            header[f.name] = list(value) if isinstance(value, tuple) else value
    head = json.dumps(header).encode()
    return struct.pack("<I", len(head)) + head + b"".join(chunks)


# Parsed headers by their bytes. Entries of one shape, dtype and set of rules share a header, so even the
# exhaustive suite's entries have only a few thousand distinct headers; parsing each only once keeps JSON
# parsing out of most cache hits.
_LAYOUTS: dict[bytes, tuple] = {}
_MAX_LAYOUTS = 4096


def decode(blob: bytes) -> Expected:
    """The Expected that `encode` wrote."""
    (size,) = struct.unpack_from("<I", blob)
    head = blob[4:4 + size]
    layout = _LAYOUTS.get(head)
    if layout is None:
        layout = _layout(json.loads(head))
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[head] = layout
    plain, arrays = layout
    data = memoryview(blob)[4 + size:]
    fields = dict(plain)
    for name, dtype, shape, offset, nbytes in arrays:
        fields[name] = np.frombuffer(data[offset:offset + nbytes], dtype=dtype).reshape(shape).copy()
    return Expected(**fields)


def _layout(header: dict) -> tuple[tuple[tuple[str, object], ...], tuple[tuple, ...]]:
    """A header as the plain fields' values (lists as tuples: immutable, so entries may share them) and
    where each array lies; ValueError for an array of a dtype `encode` never writes."""
    plain, arrays = [], []
    for name in _EXPECTED_FIELDS:
        value = header.get(name)
        if name in _ARRAY_FIELDS and value is not None:
            dtype, shape, offset, nbytes = value
            if dtype not in _ARRAY_DTYPES:
                raise ValueError(f"unexpected dtype {dtype!r} in a cache entry")
            arrays.append((name, dtype, tuple(shape), offset, nbytes))
        else:
            plain.append((name, tuple(value) if isinstance(value, list) else value))
    return tuple(plain), tuple(arrays)
