"""kl-conformance: a spec-driven reference and conformance harness for kl_div."""

__version__ = "0.1.0"
