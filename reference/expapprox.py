"""The float32 approximation of exp that a library may take in every dtype: where it saturates, and how much its
error loosens the bound of each term that holds exp(target).

spec: dtypes.exp = float32_approximation, dtypes.exp_approximation. The loss's terms are reference/forward.py's,
the gradients' reference/grad.py's and reference/derivative.py's; they ask here whether the choice is taken.
Never imports a framework.
"""

from __future__ import annotations

import numpy as np

from conformance.core.formula import VARIABLES, evaluate
from conformance.core.model import Spec

APPROXIMATION = "float32_approximation"


def approximated(spec: Spec, log_target: bool) -> bool:
    """Whether exp(target) is the approximation's in a call with `log_target` (spec: dtypes.exp)."""
    return log_target and spec.data["dtypes"]["exp"]["choice"] == APPROXIMATION


def _beyond(t: np.ndarray, spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """Where the approximation saturates exp(t): to +inf (t above `above`) and to 0 (t below `below`); a NaN
    target is neither."""
    limits = spec.data["dtypes"]["exp_approximation"]
    with np.errstate(invalid="ignore"):
        return t > limits["above"], t < limits["below"]


def saturated(p: np.ndarray, t: np.ndarray, spec: Spec) -> np.ndarray:
    """exp(t) as the approximation returns it, given the exact `p`: +inf above `above`, 0 below `below`, `p`
    elsewhere (a NaN stays NaN), in p's dtype."""
    p = np.asarray(p)
    high, low = _beyond(t, spec)
    return np.where(high, p.dtype.type(np.inf), np.where(low, p.dtype.type(0), p))


def saturated_terms(loss: np.ndarray, x: np.ndarray, t: np.ndarray, spec: Spec) -> np.ndarray:
    """The loss's terms exp(t) * (t - x) where the approximation saturates exp(t) (a finite target beyond its
    limits), in IEEE arithmetic whatever the input (inf * 0 and 0 * inf are NaN), as the gradients take them;
    `loss` elsewhere. A NaN input is nan_propagation's."""
    high, low = _beyond(t, spec)
    with np.errstate(all="ignore"):
        beyond = np.isfinite(t) & ~np.isnan(x)
        high, low = high & beyond, low & beyond
        if not (high.any() or low.any()):
            return loss
        loss = np.array(loss)
        loss[high] = np.inf * (t[high] - x[high])
        loss[low] = 0.0 * (t[low] - x[low])
    return loss


def looser_bound(value: np.ndarray, t: np.ndarray, holds_exp: np.ndarray, spec: Spec) -> np.ndarray:
    """What the approximation's relative error adds to the bound of each term of `value` that `holds_exp` (every
    log-target term the formula computes: exp(target) times a factor): relative_error * |value|, the error of
    exp(target) carried through the product (not the terms' magnitude: where t ~ x the term is near 0, and so is
    exp's part of its error); 0 elsewhere, and where the value is not finite."""
    text = spec.data["dtypes"]["exp_approximation"]["relative_error"]
    with np.errstate(invalid="ignore", over="ignore"):
        error = evaluate(text, VARIABLES["dtypes.exp_approximation.relative_error"], target=np.asarray(t, np.float64),
                         u=spec.unit_roundoff("float32"))
        value = np.abs(np.asarray(value, np.float64))
        return np.where(holds_exp & np.isfinite(error) & np.isfinite(value), error * value, 0.0)
