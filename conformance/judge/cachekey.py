"""The reference cache's keys: the build (a digest of the code that computes an answer, and of NumPy) and the
key of one expectation (the spec, the part, the dialect and the case's content).

An entry is keyed by everything the result depends on: the reference's own source code, NumPy's version and long
double, the spec (its hash, so each alternative spec of an explanation has its own entries), the part, and the
case's content (parameters, dtypes and the bytes of its values; not its id, which a user file may reuse). A hit is
therefore exactly what the reference would compute, and any change misses. The code in a build is found by
reading imports from the roots named here (code_modules), not from a list.

Digests source files and case values; never imports the modules it reads, and never stores anything.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from pathlib import Path

import numpy as np

from conformance.core.case import Case
from conformance.core.model import Spec

# Where the code that decides a cached answer starts: the reference and the cache (refcache.py, and the entry format
# it imports) for an expectation; the case judge, which asks for explanations and documentation, for an
# explanation. The modules whose source enters each key are these and every project module they import
# (code_modules).
REFERENCE_ROOTS = ("conformance.reference.forward", "conformance.reference.grad", "conformance.judge.refcache")
EXPLAIN_ROOTS = ("conformance.judge.casejudge",)

_IMPORT = re.compile(rb"^[ \t]*import[ \t]+(conformance(?:\.\w+)*)", re.M)
_FROM_IMPORT = re.compile(rb"^[ \t]*from[ \t]+(conformance(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


@functools.lru_cache(maxsize=None)
def code_modules(roots: tuple[str, ...]) -> tuple[str, ...]:
    """`roots` and every project module they import, directly or through others, found by reading their source
    (nothing is imported; an import in a docstring counts too, which can only add a module): the code whose
    edits must change a cache key. Sorted by name."""
    found: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in found:
            continue
        found.add(module)
        source = _source(module)
        todo += [m.decode() for m in _IMPORT.findall(source)]
        for package, names in _FROM_IMPORT.findall(source):
            # `from package import module` names a module; `from module import name` names the module
            package = package.decode()
            named = (n.split()[0] for n in re.sub(rb"#[^\n]*", b"", names).strip(b"()").decode().split(",") if n.strip())
            submodules = [f"{package}.{n}" for n in named if _is_module(f"{package}.{n}")]
            todo += submodules or [package]
    return tuple(sorted(m for m in found if m != "conformance"))


def _source(module: str) -> bytes:
    return _module_file(module).read_bytes()


def _is_module(name: str) -> bool:
    return _module_file(name) is not None


@functools.lru_cache(maxsize=None)
def _module_file(name: str) -> Path | None:
    """The source file of project module `name`, or None where `name` is no module; found on disk, without
    importing it (its package's own folder may lie elsewhere: pyproject.toml's package-dir)."""
    parts = name.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        folder = _package_folder(".".join(parts[:depth]))
        if folder is not None:
            base = folder.joinpath(*parts[depth:])
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    return path
            return None
    return None


@functools.lru_cache(maxsize=None)
def _package_folder(package: str) -> Path | None:
    """The folder of a package whose subpackages are installed from folders of their own (conformance and
    conformance.reference, cases, adapters, spec), else None."""
    if package != "conformance" and package.count(".") != 1:
        return None
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(locations[0]) if locations else None


@functools.lru_cache(maxsize=1)
def reference_build() -> str:
    """A digest of what the reference's results depend on besides its inputs: its code and NumPy."""
    digest = _source_digest(code_modules(REFERENCE_ROOTS))
    digest.update(f"{np.__version__} {np.finfo(np.longdouble)!r}".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def explain_build() -> bytes:
    """A digest of the code that turns expectations into an explanation (the case judge and what it imports)."""
    return _source_digest(code_modules(EXPLAIN_ROOTS)).digest()


def _source_digest(modules: tuple[str, ...]):
    """A blake2b digest of the modules' names and source files."""
    digest = hashlib.blake2b(digest_size=8)
    for module in modules:
        digest.update(module.encode() + b"\0" + _source(module))
    return digest


def case_key(content: bytes, spec: Spec, part: str, dialect: str = "canonical") -> bytes:
    """The key of one expectation: the spec, the part, the dialect and everything of the case the reference reads
    (`content`, the case's `content_digest`)."""
    return hashlib.blake2b(repr((spec.hash, part, dialect)).encode() + content, digest_size=20).digest()


def content_digest(case: Case) -> bytes:
    """Everything of the case the reference reads: parameters, dtypes, shapes and the values' bytes."""
    digest = hashlib.blake2b(digest_size=20)
    p = case.params
    digest.update(repr((p.reduction, p.log_target, p.size_average, p.reduce, p.prob_input,
                        case.dtype.input, case.dtype.target, case.input.shape, case.target.shape)).encode())
    for values in (case.input, case.target):
        digest.update(np.ascontiguousarray(values, dtype=np.float64).view(np.uint8))
    return digest.digest()
