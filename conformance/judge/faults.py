"""Named fault patterns: answers that no spec choice gives but that ports are seen to give, each naming the
spec rule it breaks.

The spec stays normative: a divisor taken from the wrong dimension or an upstream gradient ignored is
nobody's choice, so it is not an alternative in the YAML. The case judge tries these patterns after the
spec's alternatives, and only where no alternative reproduces an observation; a pattern that reproduces it
names the rule the observation breaks as its cause, with what the pattern did.

Asks the reference for expectations; never imports a framework.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from conformance.core.case import Case
from conformance.core.model import Expected, Observation, Spec
from conformance.judge.compare import passes
from conformance.judge.explain import indistinguishable
from conformance.reference.forward import broadcast_inputs, effective_reduction, reduction_divisor
from conformance.reference.grad import expected_for, expected_grad


@dataclasses.dataclass(frozen=True)
class Fault:
    """A fault pattern that reproduced an observation: the spec rule it breaks and what it did."""

    breaks: str
    did: str

    def __str__(self) -> str:
        return f"fault {self.did} (breaks {self.breaks})"


def find_fault(case: Case, observed: Observation, spec: Spec, part: str, dialect: str,
               canonical: Expected) -> Fault | None:
    """The first fault pattern whose answer `observed` passes as, and that an observation can tell from the
    spec's answer `canonical` (explain.indistinguishable), or None. Only values are tried: a raise, a shape
    or a dtype has a verdict that names its rule already."""
    if observed.raised or observed.unsupported is not None or observed.value is None or canonical.error_id is not None:
        return None  # a value where the spec expects an error is that error's rule (errors.<id>)
    for fault, expected in _candidates(case, spec, part, dialect, canonical):
        if passes(expected, observed) and not indistinguishable(expected, canonical):
            return fault
    return None


def _candidates(case: Case, spec: Spec, part: str, dialect: str,
                canonical: Expected) -> Iterator[tuple[Fault, Expected]]:
    yield from _wrong_divisors(case, spec, part, dialect)
    if part != "forward":
        yield from _upstream_ignored(case, spec, part, dialect)
        zeros = zero_gradient(canonical)
        if zeros is not None:
            yield ZERO_GRADIENT, zeros


# A gradient of zeros wherever the spec has one, NaN and infinities included: the argument taken as a constant,
# which no rule allows (spec: gradients.parts names each gradient the loss has). MindSpore's mint APIs give it for
# the target under jit, where PyNative raises; every such row, value or NaN pattern, wide or narrow, is this one.
ZERO_GRADIENT = Fault("gradients.parts", "gives zeros for the whole gradient (the argument taken as a constant)")


def zero_gradient(canonical: Expected) -> Expected | None:
    """The answer of ZERO_GRADIENT to a call whose gradient the spec gives as `canonical`: zeros of its shape and
    dtype, exact; None where no finite element of `canonical` is further than twice its bound from 0 (every one
    NaN, infinite or about 0), where zeros are no evidence of an argument taken as a constant (a NaN lost is as
    likely)."""
    if canonical.value is None:
        return None
    value = np.asarray(canonical.value, dtype=np.float64)
    finite = np.isfinite(value)
    if not (np.abs(value[finite]) > 2 * np.broadcast_to(canonical.bound, value.shape)[finite]).any():
        return None
    zeros = np.zeros(value.shape)
    return dataclasses.replace(canonical, value=zeros, bound=np.zeros_like(zeros), rule_map=None, alternate=None)


def _wrong_divisors(case: Case, spec: Spec, part: str, dialect: str) -> Iterator[tuple[Fault, Expected]]:
    """mean or batchmean dividing the sum by another size of the shapes than the one the spec states
    (spec: reductions.<reduction>.divisor): another dimension, the element count, or nothing at all."""
    reduction = effective_reduction(case.params, spec)
    if case.params.has_legacy or reduction not in ("mean", "batchmean"):
        return
    try:
        _, _, shape = broadcast_inputs(case, dialect, spec)
    except ValueError:  # shapes that do not broadcast: the spec expects an error, no divisor applies
        return
    out_shape = shape[:-1] if spec.dialect(dialect)["axis_sum"] else shape
    n = int(np.prod(out_shape))
    if n == 0:
        return
    right = reduction_divisor(reduction, n, case.input.shape, out_shape, spec)
    sizes = {"the number of elements": int(np.prod(shape)), "the number of results": n, "nothing (the sum)": 1}
    for name, dims in (("the result", out_shape), ("input", case.input.shape), ("target", case.target.shape)):
        for axis, size in enumerate(dims):
            sizes.setdefault(f"the size of dimension {axis} of {name}", int(size))
    sizes["the number of distributions (the elements over the last axis)"] = int(np.prod(out_shape[:-1]))
    summed, tried = None, {0, right}
    for what, divisor in sizes.items():
        if divisor in tried:
            continue
        tried.add(divisor)
        if summed is None:
            as_sum = dataclasses.replace(case, params=dataclasses.replace(case.params, reduction="sum"))
            summed = expected_for(as_sum, spec, part, dialect)
            if summed.value is None:
                return
        yield (Fault(f"reductions.{reduction}.divisor", f"divides by {what}, {divisor}, not by {right}"),
               scaled(summed, 1.0 / divisor, spec))


def _upstream_ignored(case: Case, spec: Spec, part: str, dialect: str) -> Iterator[tuple[Fault, Expected]]:
    """A gradient computed as if the gradient flowing into the loss were 1 (spec: gradients.upstream)."""
    try:
        ones = expected_grad(case, spec, part, dialect, upstream_of=lambda shape: np.ones(shape))
    except ValueError:
        return
    if ones.value is not None:
        yield Fault("gradients.upstream", "ignores the upstream gradient (takes it as 1)"), ones


def scaled(expected: Expected, factor: float, spec: Spec) -> Expected:
    """`expected` times `factor`, its bound scaled the same and widened by the rounding of the product in the
    result dtype."""
    u = spec.unit_roundoff(expected.result_dtype) if expected.result_dtype in spec.floating_dtypes else 0.0
    with np.errstate(all="ignore"):
        value = expected.value * factor
        bound = np.where(np.isfinite(value), expected.bound * factor + u * np.abs(value), 0.0)
    return dataclasses.replace(expected, value=value, bound=bound, rule_map=None, alternate=None)

