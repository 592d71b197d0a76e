"""What an adapter records of a call that raised: the framework's message as one run records it in any process."""

from __future__ import annotations

from conformance.adapters.observation import call_observed


def _raises(message: str):
    def call():
        raise RuntimeError(message)
    return call


def test_an_object_address_in_a_message_is_left_out():
    """Dynamo names the function it traced by its repr, whose address differs in every process: the message of
    one call differed from run to run, and a baseline saw it change."""
    def kl_div():
        pass
    first = call_observed(_raises(f"while tracing {kl_div!r}: unsupported"), None)
    again = call_observed(_raises(f"while tracing {kl_div!r}: unsupported".replace(hex(id(kl_div)), "0x7f00aa")),
                          None)
    assert first.exception_message == again.exception_message
    assert first.exception_message.startswith("while tracing <function ") and " at 0x" not in first.exception_message
    assert first.exception_message.endswith("kl_div>: unsupported")


def test_a_hex_value_that_is_no_address_is_kept():
    message = "expected 0x1p-149 (the smallest subnormal), got nan"
    assert call_observed(_raises(message), None).exception_message == message
