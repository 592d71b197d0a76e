"""dtypes.computation: a call computed in one fixed dtype (float32) whatever its arguments' dtypes, as Keras'
loss classes compute in keras.config.floatx().

The expected numbers are worked out here in mpmath at 200 bits from the arguments rounded to float32 by NumPy;
Keras 3.15.1's KLDivergence(reduction="sum") gives the same float32 value for this float64 call on TensorFlow,
JAX and torch (docs/frameworks/keras.md).
"""

from __future__ import annotations

import copy
import dataclasses

import mpmath
import numpy as np
import pytest

from conformance.core.choices import Alternative, touched_paths, with_alternatives
from conformance.core.errors import SpecError
from conformance.core.model import Observation
from conformance.core.specload import validate_spec_data
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

FLOAT32 = (Alternative("dtypes.computation", "float32"),)
X = [-1.1, -0.3]  # log-probabilities that float32 cannot hold exactly
T = [0.1, 0.9]


def _f32(values) -> list[float]:
    return [float(np.float32(v)) for v in values]


def _kl_sum(x, t) -> float:
    """sum t * (log t - x), exact to 200 bits."""
    mpmath.mp.prec = 200
    return float(sum(mpmath.mpf(b) * (mpmath.log(b) - mpmath.mpf(a)) for a, b in zip(x, t)))


def test_float32_computes_the_float64_call_from_its_arguments_rounded_to_float32(spec):
    case = make_case(X, T, reduction="sum", dtype="float64")
    canonical = expected_forward(case, spec)
    fixed = expected_forward(case, with_alternatives(spec, FLOAT32))
    assert (fixed.result_dtype, canonical.result_dtype) == ("float32", "float64")
    want = _kl_sum(_f32(X), _f32(T))
    assert abs(fixed.value - want) <= fixed.bound
    assert abs(canonical.value - _kl_sum(X, T)) <= canonical.bound
    # float32's tolerance, and float32's rounding of the arguments moves the value by more than float64's bound
    assert fixed.bound > 1e6 * canonical.bound
    assert abs(fixed.value - canonical.value) > canonical.bound


def test_a_float32_call_is_unchanged(spec):
    case = make_case(_f32(X), _f32(T), reduction="sum", dtype="float32")
    fixed, canonical = expected_forward(case, with_alternatives(spec, FLOAT32)), expected_forward(case, spec)
    assert (fixed.result_dtype, float(fixed.value), float(fixed.bound)) == \
        (canonical.result_dtype, float(canonical.value), float(canonical.bound))
    assert "dtypes.computation" not in touched_paths(case)


def test_a_mixed_call_is_float32_too(spec):
    case = make_case(X, [float(np.float16(v)) for v in T], reduction="sum", dtype=("float64", "float16"))
    assert expected_forward(case, spec).result_dtype == "float64"
    assert expected_forward(case, with_alternatives(spec, FLOAT32)).result_dtype == "float32"


def test_each_gradient_is_the_float32_calls_cast_back_to_its_arguments_dtype(spec):
    """grad_input = -t * 1.25 (the sum's upstream, spec: gradients.upstream.reduced), with t rounded to float32,
    then to float16 for a float16 target's gradient: log t - x + 1 times 1.25."""
    case = make_case(X, [float(np.float16(v)) for v in T], reduction="sum", dtype=("float64", "float16"))
    alt = with_alternatives(spec, FLOAT32)
    grad_input = expected_grad(case, alt, "grad_input")
    assert grad_input.result_dtype == "float64"
    want = [-v * 1.25 for v in _f32([float(np.float16(v)) for v in T])]
    assert all(abs(g - w) <= b for g, w, b in zip(grad_input.value, want, grad_input.bound))
    grad_target = expected_grad(case, alt, "grad_target")
    assert grad_target.result_dtype == "float16"
    mpmath.mp.prec = 200
    exact = [float((mpmath.log(b) - mpmath.mpf(a) + 1) * mpmath.mpf(1.25))
             for a, b in zip(_f32(X), _f32([float(np.float16(v)) for v in T]))]
    assert all(float(np.float16(v)) == v for v in grad_target.value)  # a float16 value
    assert all(abs(g - w) <= b for g, w, b in zip(grad_target.value, exact, grad_target.bound))
    # float16's rounding of the result is in the bound: twice its unit roundoff, relative
    assert all(b >= 2 * 2**-11 * abs(w) for w, b in zip(exact, grad_target.bound))


def test_a_float16_gradient_past_its_range_is_inf(spec):
    """A float16 argument whose float32 gradient overflows float16 when it is cast back: +-inf, judged by identity."""
    case = make_case([-1.0], [60000.0], reduction="sum", dtype="float16")  # grad_input -60000 * 1.25 = -75000
    got = expected_grad(case, with_alternatives(spec, FLOAT32), "grad_input")
    assert got.result_dtype == "float16" and got.value[0] == -np.inf and got.bound[0] == 0


def test_explain_names_the_fixed_computation_dtype(spec):
    """A float64 call answered in float32, from the arguments rounded to float32: behaves as float32."""
    case = make_case(X, T, reduction="sum", dtype="float64")
    fixed = expected_forward(case, with_alternatives(spec, FLOAT32))
    observed = Observation(value=np.asarray(float(np.float32(_kl_sum(_f32(X), _f32(T))))), dtype="float32", shape=())
    assert explain(case, observed, spec) == FLOAT32
    assert fixed.result_dtype == "float32"


def test_the_loader_refuses_a_computation_choice_that_names_no_dtype(spec):
    data = copy.deepcopy(dict(spec.data))
    data["dtypes"]["computation"]["choices"]["floatx"] = "cast to the framework's default dtype"
    with pytest.raises(SpecError, match=r"dtypes\.computation\.choices.*name each other choice"):
        validate_spec_data(data, "kl_div.yaml")


def test_each_argument_is_cast_from_the_value_its_own_dtype_holds(spec):
    """A float16 argument given as 0.1 holds float16's 0.0999755859375, and that is what is cast to float32."""
    case = make_case([-1.1, -0.3], [0.1, 0.9], reduction="sum", dtype="float16")
    fixed = expected_forward(case, with_alternatives(spec, FLOAT32))
    held = [float(np.float16(v)) for v in (-1.1, -0.3)], [float(np.float16(v)) for v in (0.1, 0.9)]
    assert abs(fixed.value - _kl_sum(*held)) <= fixed.bound
    assert abs(fixed.value - _kl_sum(_f32(X), _f32(T))) > 100 * fixed.bound  # not the float64 value cast


# -- dtypes.inferred: values given without a dtype -------------------------------------------------------------

def _made(case, source: str):
    from conformance.core.case import Construction

    return dataclasses.replace(case, construction=Construction(source, inferred=True))


def test_python_floats_inferred_as_float64_make_a_float64_call(spec):
    """The case's dtype is the spec's inference, float32; JAX with x64 makes the same Python floats float64."""
    case = _made(make_case(X, T, reduction="sum", dtype="float32"), "list")
    x64 = with_alternatives(spec, (Alternative("dtypes.inferred.python_float", "float64"),))
    canonical, inferred = expected_forward(case, spec), expected_forward(case, x64)
    assert (canonical.result_dtype, inferred.result_dtype) == ("float32", "float64")
    assert abs(inferred.value - _kl_sum(X, T)) <= inferred.bound
    assert abs(canonical.value - _kl_sum(_f32(X), _f32(T))) <= canonical.bound
    assert expected_grad(case, x64, "grad_input").result_dtype == "float64"
    assert "dtypes.inferred.python_float" in touched_paths(case)
    assert "dtypes.inferred.python_float" not in touched_paths(make_case(X, T, reduction="sum", dtype="float32"))


def test_a_float64_numpy_array_inferred_as_float32_makes_a_float32_call(spec):
    """MLX's conversion: the arrays are float32 before the call, so its gradients are float32 too (no cast back)."""
    narrows = with_alternatives(spec, (Alternative("dtypes.inferred.numpy_array", "float32"),))
    case = _made(make_case(X, T, reduction="sum", dtype="float64"), "numpy")
    forward = expected_forward(case, narrows)
    assert forward.result_dtype == "float32" and abs(forward.value - _kl_sum(_f32(X), _f32(T))) <= forward.bound
    assert expected_grad(case, narrows, "grad_target").result_dtype == "float32"
    assert expected_forward(case, spec).result_dtype == "float64"
    # a narrower array keeps its dtype
    half = _made(make_case(X, T, reduction="sum", dtype="float16"), "numpy")
    assert expected_forward(half, narrows).result_dtype == "float16"
    assert float(expected_forward(half, narrows).value) == float(expected_forward(half, spec).value)


def test_the_loader_refuses_an_inferred_choice_that_names_no_dtype(spec):
    data = copy.deepcopy(dict(spec.data))
    data["dtypes"]["inferred"]["python_float"]["choices"]["default"] = "the framework's default dtype"
    with pytest.raises(SpecError, match=r"dtypes\.inferred\.python_float\.choices"):
        validate_spec_data(data, "kl_div.yaml")
    data = copy.deepcopy(dict(spec.data))
    data["dtypes"]["inferred"]["numpy_array"]["choices"]["wider"] = "widened"
    with pytest.raises(SpecError, match=r"dtypes\.inferred\.numpy_array\.choices"):
        validate_spec_data(data, "kl_div.yaml")
