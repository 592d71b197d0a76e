"""The ONNX models torch's ONNX modes export, kept under the harness's cache directory.

torch.onnx.export has no cache of its own and traces the call again each time; the dynamo exporter takes a large
part of a second per model, and an ONNX mode exports once per API, call and input signature, so exporting is
most of its run. A second run reads each model back instead of exporting it again.

An entry is the model's bytes, the protobuf onnxruntime reads (loading one runs no code), after a digest of them:
an entry whose digest does not match is exported again. Its name hashes the key the adapter keeps its sessions
by (the mode, the API, the call's arguments, the inputs' shapes and dtypes); its scope (adapters/cachescope.py)
hashes the rest of what the export depends on: the versions of torch, onnx and onnxscript, and the source of the
adapter that exports. A model read back is the one the export wrote, so the rows are the same with the cache and
without it (tests/adapters/test_torch_modes.py). An export that fails is not kept: it fails again in each run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from conformance.adapters.cachescope import open_scope
from conformance.core.atomicfile import write_bytes_atomic

MAX_BYTES = 64 * 2**20
PREFIX = "onnx-"
SUFFIX = ".onnx-entry"
_DIGEST_BYTES = 32


class ModelCache:
    """Exported models under `directory` (None: no cache, every model exported), for exports that depend on
    `depends_on` beyond their own key. The scope is opened at the first model asked for, so a run without an ONNX
    mode leaves no folder."""

    def __init__(self, directory: Path | None, depends_on: Callable[[], str]) -> None:
        self._directory = directory
        self._depends_on = depends_on
        self._scope: Path | None = None
        self._opened = False

    def model(self, key: str, export: Callable[[], bytes]) -> bytes:
        """The model for `key`: read back when an earlier export kept it whole, else `export()`, kept."""
        scope = self._open()
        if scope is None:
            return export()
        path = scope / (hashlib.blake2b(key.encode(), digest_size=16).hexdigest() + SUFFIX)
        kept = _read(path)
        if kept is not None:
            return kept
        model = export()
        _write(path, model)
        return model

    def _open(self) -> Path | None:
        if not self._opened:
            self._opened = True
            self._scope = open_scope(self._directory, PREFIX, self._depends_on(), MAX_BYTES)
        return self._scope


def _read(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, model = data[:_DIGEST_BYTES], data[_DIGEST_BYTES:]
    return model if hashlib.blake2b(model, digest_size=_DIGEST_BYTES).digest() == digest else None


def _write(path: Path, model: bytes) -> None:
    """Written whole or not at all (a concurrent run, tox -p or --jobs, never reads half); a failed write costs the
    next run an export, never a result."""
    try:
        write_bytes_atomic(path, hashlib.blake2b(model, digest_size=_DIGEST_BYTES).digest() + model)
    except OSError:
        pass
