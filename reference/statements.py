"""Checks that the spec's formulas state what the reference computes.

The reference evaluates the loss and its derivatives with care the spec's one-line formulas do
not carry (extended precision, refinement where terms cancel). So the spec's `formula` texts are
statements about the reference: here they are evaluated in float64 on well-conditioned sample
points and compared with the reference's own values. A spec whose formula says something else is
refused (SpecError), rather than silently describing a computation nobody performs.
"""

from __future__ import annotations

import numpy as np

from conformance.core.errors import SpecError
from conformance.core.formula import VARIABLES, evaluate
from conformance.core.model import Spec
from conformance.reference.derivative import mixed_second_derivative, pointwise_derivative
from conformance.reference.dialect import keras_gradient, keras_pointwise
from conformance.reference.pointwise import pointwise

# Well-conditioned points (no cancellation, no underflow): the float64 evaluation of a formula is
# then within a few ulp of the truth, far inside RELATIVE.
_X = np.linspace(-3.0, -0.25, 12)
_T = {False: np.geomspace(0.05, 3.0, 12)[::-1], True: np.linspace(-2.5, 1.0, 12)}
_T_PROBABILITY = np.geomspace(0.05, 0.95, 12)  # inside Keras' clip interval [epsilon, 1]
RELATIVE = 1e-9

_VERIFIED: set[tuple] = set()


def verify_formulas(spec: Spec) -> None:
    """Raise SpecError when a formula of spec: pointwise, gradients, gradients.second_order or
    dialects.keras disagrees with the reference; each distinct set of formulas is checked once per process."""
    key = _formula_texts(spec)
    if key in _VERIFIED:
        return
    for log_target in (False, True):
        space = f"log_target_{str(log_target).lower()}"
        x, t = _X, _T[log_target]
        checks = [(f"pointwise.{space}.formula", spec.data["pointwise"][space]["formula"],
                   pointwise(x, t, log_target, spec)[0], x, t)]
        for argument in ("input", "target"):
            checks.append((f"gradients.{space}.{argument}", spec.data["gradients"][space][argument],
                           pointwise_derivative(x, t, log_target, argument, spec)[0], x, t))
        checks.append((f"gradients.second_order.formula.{space}",
                       spec.data["gradients"]["second_order"]["formula"][space],
                       mixed_second_derivative(x, t, log_target, spec)[0], x, t))
        _check(checks, spec)
    # Keras' dialect, on probabilities inside its clip interval (spec: dialects.keras); `input` is q there
    keras, q, t = spec.data["dialects"]["keras"], np.exp(_X), _T_PROBABILITY
    checks = [("dialects.keras.formula", keras["formula"], keras_pointwise(q, t, "float64", spec)[0], q, t)]
    for which in ("input", "target", "second_order"):
        checks.append((f"dialects.keras.gradients.{which}", keras["gradients"][which],
                       keras_gradient(q, t, which, "float64", spec)[0], q, t))
    _check(checks, spec)
    _VERIFIED.add(key)


def _check(checks: list, spec: Spec) -> None:
    """Each (spec path, formula text, the reference's values, input, target): the text must give the values."""
    for where, text, computed, x, t in checks:
        stated = np.broadcast_to(evaluate(text, VARIABLES["pointwise.log_target_false.formula"],
                                          input=x, target=t), x.shape)
        computed = np.asarray(computed, dtype=np.float64)
        if not np.allclose(stated, computed, rtol=RELATIVE, atol=0.0):
            i = int(np.argmax(~np.isclose(stated, computed, rtol=RELATIVE, atol=0.0)))
            raise SpecError(f"{text!r} gives {stated[i]!r} at input={x[i]!r}, target={t[i]!r}, but the "
                            f"reference computes {computed[i]!r}", file=spec.source, where=where,
                            fix="state the formula the reference computes (or change the reference in "
                                "reference/pointwise.py, reference/derivative.py or reference/dialect.py)")


def _formula_texts(spec: Spec) -> tuple:
    g, keras = spec.data["gradients"], spec.data["dialects"]["keras"]
    return tuple((spec.data["pointwise"][s]["formula"], g[s]["input"], g[s]["target"],
                  g["second_order"]["formula"][s]) for s in ("log_target_false", "log_target_true")) + \
        (keras["formula"], *(keras["gradients"][w] for w in ("input", "target", "second_order")))
