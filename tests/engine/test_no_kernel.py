"""A framework saying it has no kernel for a floating dtype is `unsupported` with its words, never an error
filed under a convention the case happens to touch (torch 1.12.1's float16 CPU kernels gave 736 such rows)."""

from __future__ import annotations

from conformance.adapters.base import call_observed
from conformance.adapters.torch import TorchAdapter


def _raises(message):
    def call():
        raise RuntimeError(message)
    return call


def test_torchs_missing_half_kernel_is_unsupported_with_its_words():
    adapter = TorchAdapter()  # nothing imported: is_no_kernel reads the message only
    observed = call_observed(_raises('"log" "_vml_cpu" not implemented for \'Half\''), adapter.to_numpy,
                             adapter.is_no_kernel, adapter.describe_exception)
    assert observed.unsupported is not None and "not implemented for 'Half'" in observed.unsupported
    assert not observed.raised


def test_an_integer_dtype_refused_with_the_same_words_stays_the_refusal_the_spec_expects():
    adapter = TorchAdapter()
    observed = call_observed(_raises('"log_vml_cpu" not implemented for \'Long\''), adapter.to_numpy,
                             adapter.is_no_kernel, adapter.describe_exception)
    assert observed.unsupported is None and observed.exception_type == "RuntimeError"
