"""What the adapter of a port needs beyond the Adapter protocol, public and kept across releases
(docs/guide/ports.md): a case's inputs as arrays of its dtype, shape and layout, the upstream gradient, the
reproducer's lines; and FunctionAdapter, the adapter of a function with torch's kl_div signature on NumPy
arrays (what `--framework package.module:function` runs, forward only, with no adapter code).

Imports no framework: a FunctionAdapter imports its function's module when it loads.
"""

from __future__ import annotations

import importlib
import inspect
from importlib import metadata
from typing import Any, Callable, ClassVar

import numpy as np

from conformance.adapters.base import (NUMPY_FLOATS, Adapter, Api, ApiCall, FrameworkUnavailable, check_script_names,
                                       layout_buffer, layout_buffer_source, layout_view_source)
from conformance.core.case import Case
from conformance.core.model import upstream_gradient

# What a port imports from here (docs/guide/ports.md): public, kept across releases.
PORT_HELPERS = ("case_inputs", "numpy_tensor", "upstream_gradient", "repro_lines", "FunctionAdapter", "TORCH_SIGNATURE")

NUMPY_DTYPES = {**NUMPY_FLOATS, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
                "uint8": np.uint8, "bool": np.bool_}
TORCH_SIGNATURE = "kl_div(input, target, reduction='mean', log_target=False)"
TORCH_KL_DIV = "torch.nn.functional.kl_div"  # the API a function of TORCH_SIGNATURE mirrors (--like torch)


def numpy_tensor(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` (float64, each exact in `dtype`) as a NumPy array of `dtype`; ValueError for a dtype NumPy has
    not (bfloat16)."""
    if dtype not in NUMPY_DTYPES:
        raise ValueError(f"NumPy has no {dtype} (it has {list(NUMPY_DTYPES)})")
    return values.astype(NUMPY_DTYPES[dtype])


def case_inputs(case: Case, tensor: Callable[[np.ndarray, str], Any] = numpy_tensor,
                swap: Callable[[Any], Any] = lambda t: t.swapaxes(-1, -2)) -> tuple[Any, Any]:
    """The case's (input, target), each of the case's dtype and shape and in its layout.

    Parameters
    ----------
    case : the case to build.
    tensor : makes the framework's tensor from a C-contiguous float64 NumPy buffer and the dtype's name
        ("float32", "int64", ...); the default makes a NumPy array of that dtype.
    swap : swaps the last two axes of a tensor (a transposed layout is that view of a swapped buffer); a
        strided layout is `t[..., ::2]` of a buffer twice as wide.

    Is equivalent to ``(case.input.astype(dtype), case.target.astype(dtype))`` for a contiguous case, with
    the same values laid out in memory as the case says otherwise.
    """
    def built(values: np.ndarray, dtype: str) -> Any:
        buffer, view = layout_buffer(values, case.layout, swap)
        return view(tensor(buffer, dtype))
    return built(case.input, case.dtype.input), built(case.target, case.dtype.target)


def repro_lines(case: Case, part: str, imports: str, call: str, gradient: str | None = None,
                tensor: str = "{values}.astype({dtype!r})", swap: str = "{}.swapaxes(-1, -2)") -> str:
    """A port's `repro_source`: its imports, x and t built as `case_inputs` builds them, `out = call`, and the
    float64 `result` (out, or `gradient` for a gradient part) with its `result_dtype`.

    Parameters
    ----------
    imports : the framework's import lines ("import mykl").
    call : the forward call on x and t as source (`Adapter.call(case, api).source()`).
    gradient : for a gradient part, the source of the gradient, which may read x, t, out and
        `upstream(shape)` (the reproducer's upstream gradient); None: the adapter has no gradients.
    tensor : a format string making the tensor from a NumPy buffer `{values}` and the dtype's name `{dtype}`.
    swap : a format string swapping the last two axes of the tensor `{}`.
    """
    if part != "forward" and gradient is None:
        raise ValueError(f"no gradient source for {part}")

    def built(name: str, dtype: str) -> str:
        made = tensor.format(values=layout_buffer_source(f"{name}_values", case.layout), dtype=dtype)
        return f"{name} = {layout_view_source(made, case.layout, swap)}"
    result = "out" if part == "forward" else "grad"
    return "\n".join([imports, built("x", case.dtype.input), built("t", case.dtype.target), f"out = {call}",
                      *([] if part == "forward" else [f"grad = {gradient}"]),
                      f"result = np.asarray({result}, dtype=np.float64)",
                      f"result_dtype = str(np.asarray({result}).dtype)"])


class FunctionAdapter(Adapter):
    """The adapter of a function that takes torch's signature (TORCH_SIGNATURE) on NumPy arrays and returns a
    NumPy array: `function = "package.module:name"` names it. Forward only, unless a subclass writes
    `gradient` and `gradient_source` and lists the arguments it differentiates in `grads`."""

    function: ClassVar[str]
    grads: ClassVar[tuple[str, ...]] = ()
    known_devices = ("cpu",)
    # the reproducer's tensor from a NumPy buffer {values} and a dtype name {dtype}: what `tensor` makes
    tensor_source: ClassVar[str] = "{values}.astype({dtype!r})"

    def tensor(self, values: np.ndarray, dtype: str) -> Any:
        """The tensor the function is handed, of `dtype`, from a float64 C-contiguous buffer: a NumPy array (a port
        of other tensors overrides this and `tensor_source`)."""
        return numpy_tensor(values, dtype)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass naming its `function` is named after the function's top-level package, its API after the
        function's dotted path, which mirrors torch's kl_div."""
        super().__init_subclass__(**kwargs)
        if "function" in cls.__dict__:
            module, _, name = cls.function.partition(":")
            cls.module = module
            cls.name = cls.__dict__.get("name", module.split(".")[0])
            cls.apis = (Api(f"{module}.{name}", grads=cls.grads, legacy_args=False, second_order=False,
                            mirrors=TORCH_KL_DIV),)

    def load(self) -> None:
        try:
            importlib.import_module(self.module)
        except Exception as exc:
            raise FrameworkUnavailable(f"cannot import {self.module}: {type(exc).__name__}: {exc}") from None

    def version(self) -> str:
        top = self.module.split(".")[0]
        try:
            return metadata.version(top)
        except metadata.PackageNotFoundError:
            return str(getattr(importlib.import_module(top), "__version__", "unknown"))

    def devices(self) -> tuple[str, ...]:
        return ("cpu",)

    def dtype_unavailable(self, dtype: str) -> str | None:
        if type(self).tensor is not FunctionAdapter.tensor or dtype in NUMPY_DTYPES:
            return None
        return f"{self.apis[0].name} takes NumPy arrays, and NumPy has no {dtype}"

    def unsupported_reason(self, case: Case, api: Api) -> str | None:
        if case.construction.source != "numpy":
            return (f"{api.name} is handed arrays made from NumPy buffers; the case makes its tensors "
                    f"from={case.construction.source} (an adapter's own build() decides how its framework makes them)")
        return super().unsupported_reason(case, api)

    def unsupported_part(self, api: Api, part: str) -> str | None:
        if part != "forward" and not self.grads:
            return (f"{api.name} is checked as a plain function (--framework {self.function}): the forward only, "
                    "since it has no autograd to ask; an adapter with a hand-written gradient() checks its gradients "
                    "(docs/guide/ports.md)")
        return super().unsupported_part(api, part)

    def build(self, case: Case, device: str) -> tuple[Any, Any]:
        return case_inputs(case, self.tensor)

    def call(self, case: Case, api: Api) -> ApiCall:
        return ApiCall.function(api.name, "x", "t", reduction=case.params.reduction, log_target=case.params.log_target)

    def to_numpy(self, result: Any) -> tuple[np.ndarray, str, tuple[int, ...]]:
        value = np.asarray(result)
        if value.dtype.kind not in "biuf":
            raise TypeError(f"kl_div returned {type(result).__name__} of {value.dtype}, not an array of numbers")
        return value.astype(np.float64), str(value.dtype), value.shape

    def gradient_source(self, case: Case, api: Api, part: str) -> str | None:
        """The source of `gradient` for the reproducer, on x, t, out and upstream(shape); None: no gradients."""
        return None

    def repro_source(self, case: Case, api: Api, device: str, part: str) -> str:
        check_script_names(case, device, part, self.known_devices)
        return repro_lines(case, part, f"import {self.module}", self.call(case, api).source(),
                           self.gradient_source(case, api, part), self.tensor_source)


def function_problem(target: str, fn: Any) -> str | None:
    """Why `fn`, found at `target` ("package.module:name"), cannot be judged as a function of torch's
    signature, or None."""
    if not callable(fn):
        return f"is a {type(fn).__name__}, neither an Adapter class nor a function"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: the call itself tells
    try:
        signature.bind(None, None, reduction="mean", log_target=False)
    except TypeError as exc:
        return f"takes {target.partition(':')[2]}{signature}, not torch's {TORCH_SIGNATURE} ({exc})"
    return None
