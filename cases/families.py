"""Value families: how a case's input and target values are drawn.

A family draws float64 values for given shapes; the generator then rounds them to
the case's dtypes. Well-posed families are valid distributions (the harness must
not cry wolf on them); edge families aim at one convention of the spec each.

Draws values only; never imports a framework or the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.cases import rounded_math

Shape = tuple[int, ...]
Draw = Callable[[np.random.Generator, Shape, Shape, bool], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Family:
    """A named way of drawing (input, target); `edge` families are run in full."""

    name: str
    draw: Draw
    edge: bool
    log_targets: tuple[bool, ...] = (False, True)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    if logits.ndim == 0:
        return np.zeros_like(logits)
    if logits.size == 0:
        return logits
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    return shifted - rounded_math.log(np.sum(rounded_math.exp(shifted), axis=-1, keepdims=True))


def _distribution(rng: np.random.Generator, shape: Shape, log_space: bool, scale: float = 2.0) -> np.ndarray:
    logp = _log_softmax(rng.standard_normal(shape) * scale)
    return logp if log_space else rounded_math.exp(logp)


def _softmax(rng, in_shape, tg_shape, log_target):
    return _distribution(rng, in_shape, True), _distribution(rng, tg_shape, log_target)


def _unnormalized(rng, in_shape, tg_shape, log_target):
    target = rng.normal(0.0, 1.5, tg_shape) if log_target else rng.uniform(0.01, 3.0, tg_shape)
    return rng.normal(-1.0, 2.0, in_shape), target


def _identical(rng, in_shape, tg_shape, log_target):
    """q == p up to rounding, so the KL cancels to about zero (spec: tolerance.reduction)."""
    base_shape = in_shape if int(np.prod(in_shape)) <= int(np.prod(tg_shape)) else tg_shape
    logp = _distribution(rng, base_shape, True)
    try:
        x = np.broadcast_to(logp, in_shape).copy()
        t = np.broadcast_to(logp if log_target else rounded_math.exp(logp), tg_shape).copy()
    except ValueError:  # shapes that broadcast only mutually: draw each side alone
        return _distribution(rng, in_shape, True), _distribution(rng, tg_shape, log_target)
    return x, t


def _onehot(rng, in_shape, tg_shape, log_target):
    p = np.zeros(tg_shape)
    if p.ndim == 0:
        p = np.asarray(1.0)
    elif p.size:
        classes = rng.integers(0, tg_shape[-1], tg_shape[:-1])
        np.put_along_axis(p, classes[..., None], 1.0, axis=-1)
    with np.errstate(divide="ignore"):
        return _distribution(rng, in_shape, True), (rounded_math.log(p) if log_target else p)


def _pick(rng: np.random.Generator, choices: list[float], shape: Shape) -> np.ndarray:
    return np.asarray(rng.choice(np.asarray(choices, dtype=np.float64), size=shape))


def _zero_prob(rng, in_shape, tg_shape, log_target):
    """Zero probabilities (0, -0.0, or -inf in log space) against -inf, finite and +inf inputs.

    spec: pointwise.conventions.target_zero, log_target_neg_inf
    """
    x = _pick(rng, [-np.inf, -2.5, -0.75, 0.0, np.inf], in_shape)
    zeros = [-np.inf] if log_target else [0.0, -0.0]
    t = _pick(rng, zeros * 3 + ([-1.2, -0.1] if log_target else [0.25, 0.6]), tg_shape)
    return x, t


def _negative_target(rng, in_shape, tg_shape, log_target):
    """Targets below zero: outside the domain of log (spec: pointwise.conventions.target_negative)."""
    return rng.normal(-1.0, 1.0, in_shape), rng.uniform(-1.0, 1.0, tg_shape)


def _infinities(rng, in_shape, tg_shape, log_target):
    """+-inf in input and target beside regular values (spec: pointwise.conventions.infinities)."""
    x = _pick(rng, [-np.inf, np.inf, -1.0, -0.25, 0.5], in_shape)
    t = _pick(rng, [np.inf, 0.3, 1.5] + ([-0.7, 2.0] if log_target else [0.05, 0.9]), tg_shape)
    return x, t


def _nan(rng, in_shape, tg_shape, log_target):
    """NaN in input or target, next to zero targets too (spec: pointwise.conventions.nan_propagation)."""
    x = _pick(rng, [np.nan, -1.0, -0.5, -2.0], in_shape)
    t = _pick(rng, [np.nan, (-np.inf if log_target else 0.0), 0.4, 0.7], tg_shape)
    return x, t


def _tiny(rng, in_shape, tg_shape, log_target):
    """Subnormal and near-underflow probabilities (spec: tolerance.pointwise, its tiny term)."""
    exponents = rng.uniform(-160.0, -10.0, tg_shape)  # float32 subnormals start below 2**-126
    target = exponents * rounded_math.log(2.0) if log_target else rounded_math.exp2(exponents)
    return rng.uniform(-110.0, -5.0, in_shape), target


def _large(rng, in_shape, tg_shape, log_target):
    """Large magnitudes that overflow narrow dtypes (spec: dtypes.precision)."""
    sign = np.where(rng.random(in_shape) < 0.5, -1.0, 1.0)
    x = sign * rounded_math.exp(rng.uniform(rounded_math.log(10.0), rounded_math.log(6.0e4), in_shape))
    target = rng.uniform(-20.0, 40.0, tg_shape) if log_target else rounded_math.exp(rng.uniform(0.0, rounded_math.log(1.0e3), tg_shape))
    return x, target


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("softmax", _softmax, edge=False),  # log-softmax inputs against softmax targets
    Family("unnormalized", _unnormalized, edge=False),  # positive targets that do not sum to 1
    Family("identical", _identical, edge=False),  # q == p: the KL cancels to about 0
    Family("onehot", _onehot, edge=True),  # one-hot targets: many exact zeros (-inf in log space)
    Family("zero_prob", _zero_prob, edge=True),  # zero targets against infinite inputs
    Family("negative_target", _negative_target, edge=True, log_targets=(False,)),  # targets below zero
    Family("infinities", _infinities, edge=True),  # +-inf in either argument
    Family("nan", _nan, edge=True),  # NaN in either argument
    Family("tiny", _tiny, edge=True),  # subnormal and tiny probabilities
    Family("large", _large, edge=True),  # large magnitudes, overflow in narrow dtypes
)}
WELL_POSED = tuple(name for name, f in FAMILIES.items() if not f.edge)
EDGE = tuple(name for name, f in FAMILIES.items() if f.edge)


def draw_integers(rng: np.random.Generator, in_shape: Shape, tg_shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    """Integer-valued draws for the integral-dtype error cases."""
    return rng.integers(-3, 1, in_shape).astype(np.float64), rng.integers(0, 2, tg_shape).astype(np.float64)


def draw_pinned(shape: Shape, log_target: bool) -> tuple[np.ndarray, np.ndarray]:
    """The mode suite's pinned values (cases/suites.py PINNED_KEYS), the same for every seed. Linear: x = -60000,
    t = 5 in the first class of each distribution, whose term is beyond float16 while the mean is not, and
    x = 0, t = 0 (a zero term) elsewhere; log space: x = 0, t = 80 everywhere, exp(t) beyond float16."""
    if log_target:
        return np.full(shape, 0.0), np.full(shape, 80.0)
    x, t = np.zeros(shape), np.zeros(shape)
    x[..., 0], t[..., 0] = -60000.0, 5.0
    return x, t


def draw_certain(rng: np.random.Generator, in_shape: Shape, tg_shape: Shape,
                 log_target: bool) -> tuple[np.ndarray, np.ndarray]:
    """The construction cases' values (cases/suites.py `construction_keys`): an input at full precision in
    every element (a 0-d one too), against a certain target, probability 1 (0 in log space). Each term is then
    -input, exact in every dtype and by any formula (exp(0) and log(1) are exact), so what the case judges is
    the input's values as the framework made them: a constructor that rounds through a narrower dtype shows."""
    return rng.normal(-1.0, 2.0, in_shape), np.full(tg_shape, 0.0 if log_target else 1.0)
