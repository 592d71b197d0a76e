"""The Python API's arguments, checked as the CLI checks its options, and its errors in its own words: each
function of conformance/api.py refuses a value of the wrong kind in one line naming the argument, and a
ConformanceError from the layers below names the API's arguments, never the command line's options.

Reads no framework and writes nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from conformance.core.errors import ConformanceError, UsageError, unusable_path
from conformance.core.known import KnownFindings, load_known
from conformance.core.model import Observation, Spec
from conformance.core.specload import load_spec
from conformance.options import API, spelled
from conformance.run.outdir import RESUME_FIX

RUNS_FIX = "pass what conformance.api.run returned, or the directory a run wrote (its out, `kl-conformance run --out`)"


def in_api_words(function):
    """Raise a ConformanceError from the layers below naming the argument as this API calls it (`dtype`,
    `apis`), not as the command line does (`--dtype`, `--api`)."""
    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ConformanceError as exc:
            exc.where, exc.problem, exc.fix = (spelled(text, API) if text else text
                                               for text in (exc.where, exc.problem, exc.fix))
            if exc.fix:  # the API continues no run: it has no --resume
                exc.fix = exc.fix.replace(RESUME_FIX, "")
            exc.args = (exc.render(),)
            raise
        except (OSError, RuntimeError) as exc:
            problem = unusable_path(exc)
            if problem is None:
                raise
            raise problem from None
    return checked


def given_spec(spec: Any) -> Spec:
    """The `spec` a function was given, or the shipped one; anything but a Spec is refused in one line."""
    if spec is None:
        return load_spec()  # the shipped spec
    if not isinstance(spec, Spec):
        raise UsageError(f"expected a Spec, got {type(spec).__name__} {spec!r}", where="spec",
                         fix="pass what conformance.api.load_spec(path) returns, or leave it out for the shipped spec")
    return spec


def known_findings(known: "str | Path | KnownFindings | None") -> KnownFindings | None:
    """A known-findings file (a path) read and checked, or KnownFindings as they are."""
    if known is None or isinstance(known, KnownFindings):
        return known
    path_or_none(known, "known")
    return load_known(known)


def path_or_none(path: Any, keyword: str) -> None:
    if path is not None and not isinstance(path, (str, Path)):
        raise UsageError(f"expected a path, got {type(path).__name__} {path!r}", where=keyword,
                         fix="pass a str or a pathlib.Path, or None")


def listed(runs: Any) -> list:
    try:
        return list(runs)
    except TypeError:
        raise UsageError(f"expected a run or a list of runs, got {type(runs).__name__}", where="runs",
                         fix=RUNS_FIX) from None


def flags(**given: Any) -> None:
    """Each switch is True or False: `force="no"` would otherwise read as True (and replace a run)."""
    for keyword, value in given.items():
        if type(value) is not bool:
            raise UsageError(f"expected True or False, got {value!r}", where=keyword,
                             fix=f"pass {keyword}=True or {keyword}=False")


def observation_of(observed: Any, dtype: str | None, warnings: tuple[str, ...], spec: Spec) -> Observation:
    """What `judge` was given, as the Observation a run judges: an array, an exception, or one made by hand."""
    if isinstance(observed, Observation):
        return _checked(observed, spec)
    if isinstance(observed, BaseException):
        return Observation(exception_type=type(observed).__name__, exception_message=str(observed),
                           warnings=warnings)
    fix = ("pass the framework's result as an array of real numbers, the exception its call raised, or a "
           "conformance.api.Observation")
    try:
        array = np.asarray(observed)
    except Exception as exc:  # a ragged list, an object NumPy cannot hold
        raise UsageError(f"not an array of numbers ({type(exc).__name__}: {exc})", where="observed", fix=fix) from None
    if np.iscomplexobj(array):  # its imaginary part would be dropped, and the rest judged as the real loss
        raise UsageError(f"complex values ({array.dtype}): the loss is real", where="observed",
                         fix=fix + " (a framework that answers in complex numbers diverges: judge "
                                   "Observation(dtype='" + str(array.dtype) + "', shape=...) to say so)")
    if array.dtype.kind not in "biuf":
        raise UsageError(f"not an array of numbers (dtype {array.dtype}, from {type(observed).__name__})",
                         where="observed", fix=fix)
    return Observation(value=np.asarray(array, dtype=np.float64), dtype=dtype or str(array.dtype),
                       shape=tuple(array.shape), warnings=warnings)


def _real(dtype: str, spec: Spec) -> bool:
    """Whether a result of `dtype` holds real numbers: one of the spec's dtypes, or a real one NumPy knows."""
    if dtype in spec.floating_dtypes + spec.rejected_dtypes:
        return True
    try:
        return np.dtype(dtype).kind in "biuf"
    except TypeError:
        return False


def _checked(observed: Observation, spec: Spec) -> Observation:
    """An Observation made by hand, as an adapter makes one: a value with its dtype and shape, or an exception's
    type, or a reason it is unsupported; each field of its type. Refused in one line otherwise."""
    fix = ("make it as an adapter does: Observation(value=np.asarray(result, dtype=np.float64), dtype='float32', "
           "shape=result.shape), or Observation(exception_type='ValueError', exception_message='...')")
    problems = [f"{name} is {getattr(observed, name)!r}, not text" for name in
                ("dtype", "exception_type", "exception_message", "unsupported", "fallback")
                if getattr(observed, name) is not None and not isinstance(getattr(observed, name), str)]
    if not isinstance(observed.warnings, tuple) or not all(isinstance(w, str) for w in observed.warnings):
        problems.append(f"warnings is {observed.warnings!r}, not a tuple of messages")
    if observed.value is not None:
        if not isinstance(observed.value, np.ndarray) or observed.value.dtype.kind not in "biuf":
            problems.append(f"value is {type(observed.value).__name__}, not a NumPy array of real numbers")
        elif observed.dtype is None or not isinstance(observed.shape, tuple) or \
                not all(isinstance(n, int) and n >= 0 for n in observed.shape):
            problems.append(f"a value needs its dtype and its shape (a tuple of sizes), got dtype {observed.dtype!r}, "
                            f"shape {observed.shape!r}")
    elif observed.dtype is not None and not (isinstance(observed.shape, tuple) and
                                             all(isinstance(n, int) and n >= 0 for n in observed.shape)):
        problems.append(f"a dtype without values needs its shape (a tuple of sizes), got {observed.shape!r}")
    elif observed.dtype is not None and not observed.raised and observed.unsupported is None \
            and observed.fallback is None and _real(observed.dtype, spec):
        problems.append(f"a result of dtype {observed.dtype} without its values (only a dtype with no real values, "
                        "such as complex64, is judged by its dtype and shape alone)")
    elif not (observed.raised or observed.unsupported is not None or observed.dtype is not None):
        problems.append("no value, no dtype, no exception and no reason it is unsupported")
    if problems:
        raise UsageError(f"an Observation that no adapter makes: {problems[0]}", where="observed", fix=fix)
    return observed
