"""A defect's snippet (adapters/reproducer.py: python_snippet) leaves the reproducer's checks out whatever words the
adapter's MissingGradient class says: Keras's docstring ("The tape gave no gradient") stayed behind alone, an
indented line after nothing, and the snippet was no Python."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from conformance.adapters.base import python_snippet
from conformance.reference.grad import expected_for
from tests.helpers import make_case

SOURCES = {
    "torch": ['class MissingGradient(Exception):', '    """torch.autograd.grad gave no gradient (None)."""', '',
              'grad = f(x)', 'if grad is None:  # the harness records this as MissingGradient',
              '    raise MissingGradient("no gradient")', 'result = grad'],
    "keras": ['', 'class MissingGradient(Exception):', '    """The tape gave no gradient (None)."""', '',
              'with device():', '    grad_input = f(x)', 'if grad_input is None:', '    raise MissingGradient("none")',
              'result = grad_input'],
    "paddle": ['class MissingGradient(Exception): """paddle.grad gave no gradient (None)."""', '', 'grad = f(x)',
               '    if grad is None:', '        raise MissingGradient("none")', 'result = grad'],
}


@pytest.mark.parametrize("adapter_style", sorted(SOURCES))
def test_a_snippet_leaves_the_missing_gradient_check_out_and_is_python(adapter_style, spec):
    case = make_case(np.zeros((1, 1)), np.full((1, 1), 0.5), reduction="none")
    snippet = python_snippet("\n".join(SOURCES[adapter_style]), case, "grad_input", expected_for(case, spec, "grad_input"))
    ast.parse(snippet)
    assert "MissingGradient" not in snippet and "gave no gradient" not in snippet and "is None" not in snippet
    assert snippet.rstrip().split("\n")[-2].strip().startswith("result = ")
