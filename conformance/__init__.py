"""kl-conformance: a spec-driven reference and conformance harness for kl_div."""

from __future__ import annotations

DISTRIBUTION = "kl-conformance"
UNKNOWN_VERSION = "0+unknown"  # the harness imported from a source tree that was never installed

_version: str | None = None


def __getattr__(name: str) -> str:
    """`conformance.__version__`: the installed distribution's version (from its git tag when built, see
    pyproject.toml), looked up on first use so that importing the package stays cheap for the worker."""
    global _version
    if name != "__version__":
        raise AttributeError(f"module 'conformance' has no attribute {name!r}")
    if _version is None:
        from importlib import metadata

        try:
            _version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            _version = UNKNOWN_VERSION
    return _version
