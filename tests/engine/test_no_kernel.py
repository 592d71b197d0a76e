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


def test_oneflows_refusal_reads_alike_in_every_process():
    """OneFlow numbers its ops and graphs per process and lists an op's argument dtypes in a hash map's order
    (seen in two runs of the matrix: target_0 before input_0, then the reverse): one refusal, one message."""
    from conformance.adapters.oneflow import OneFlowAdapter

    def refusal(op: int, order: tuple[str, ...]) -> str:
        return ("Error: Cannot find the kernel matching Current OperatorConf.  The Info of OperatorConf are \n"
                f" op_name: kl_div_loss{op}\n op_type_name: kl_div_loss\n DeviceType_Name: kCPU\n"
                + "".join(f" DataType_Name of {name}: kFloat16\n" for name in order) + "File KLGraph_3, line 2")
    adapter = OneFlowAdapter()  # nothing imported: describe_exception reads the message only
    seen = {adapter.describe_exception(RuntimeError(refusal(op, order)))
            for op, order in ((0, ("target_0", "input_0", "out_0")), (7, ("input_0", "target_0", "out_0")))}
    assert len(seen) == 1, seen
    (text,) = seen
    assert text.index("input_0") < text.index("out_0") < text.index("target_0") and "KLGraph_," in text
