"""Test-only adapters that misbehave on chosen cases: segfault, abort, hang, raise, return garbage.

They prove the harness's isolation and recovery paths. Cases whose id contains
"fault" trigger the misbehaviour; every other case is computed honestly with NumPy
(float64, the spec's formula) so that the run around the fault has normal verdicts.
They live here, not in adapters/, and stand in for no real framework anywhere else.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import types

import numpy as np

from conformance.adapters.base import Adapter, Api, ApiCall, Mode, call_observed
from conformance.core.case import Case
from conformance.core.model import EAGER, Observation


class NumpyAdapter(Adapter):
    """An honest float64 NumPy kl_div, the baseline the faulty adapters misbehave from."""

    name = "numpy-test"
    apis = (Api("numpy.kl_div"),)
    known_devices = ("cpu",)
    delay_s = 0.0

    def load(self) -> None:
        pass

    def version(self) -> str:
        return np.__version__

    def devices(self) -> tuple[str, ...]:
        return ("cpu",)

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        if "fault" in case.id:
            return self.misbehave(case)
        if self.delay_s:
            time.sleep(self.delay_s)
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))

    def compute(self, case: Case) -> np.ndarray:
        x, t = np.broadcast_arrays(case.input, case.target)
        with np.errstate(all="ignore"):
            loss = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0)
        return {"none": loss, "sum": np.asarray(loss.sum()), "mean": np.asarray(loss.mean())}[case.params.reduction]

    def misbehave(self, case: Case) -> Observation:
        raise NotImplementedError


class SegfaultAdapter(NumpyAdapter):
    def misbehave(self, case):
        print("about to dereference NULL", flush=True)
        ctypes.string_at(0)  # SIGSEGV


class OneApiCrashesAdapter(NumpyAdapter):
    """Two APIs; the second kills its process with SIGFPE on the fault case, as Paddle 3.0.0's backward of an
    empty log_target case does, while the first answers it correctly."""

    apis = (Api("numpy.kl_div"), Api("numpy.kl_div_crashing"))

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        if "fault" in case.id and api.name == "numpy.kl_div_crashing":
            os.kill(os.getpid(), signal.SIGFPE)
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))


class PoisoningAdapter(NumpyAdapter):
    """A case whose id says "poison" raises, and leaves its process unable to make any later call: the next one
    kills it (SIGSEGV), as OneFlow 0.9.0's graph mode aborts on the call after a graph that failed to compile.
    A "fault" case crashes whatever came before it."""

    poisoned = False

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        if PoisoningAdapter.poisoned or "fault" in case.id:
            ctypes.string_at(0)  # SIGSEGV
        if "poison" in case.id:
            PoisoningAdapter.poisoned = True
            return call_observed(lambda: (_ for _ in ()).throw(RuntimeError("graph failed to compile")),
                                 lambda v: (v, "float64", v.shape))
        return super().run(case, api, device, part)


class BlockPathAdapter(NumpyAdapter):
    """Off by one on every element of a case of two or more elements (a kernel's vector path, as Paddle's CPU exp
    is wrong on whole blocks), right on a lone element, but for one of target 0.75 (another behaviour, off by
    one alone): a reproducer minimised to that element would show the other behaviour."""

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        def compute():
            value = self.compute(case)
            off = case.input.size > 1 or bool((case.target == 0.75).all())
            return value + (1.0 if off else 0.0)
        return call_observed(compute, lambda v: (v, "float64", v.shape))

    def repro_source(self, case, api, device, part):
        return ("x, t = x_values, t_values\noff = x.size > 1 or bool((t == 0.75).all())\n"
                "result = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0) + (1.0 if off else 0.0)")


class AbortAdapter(NumpyAdapter):
    def misbehave(self, case):
        sys.stderr.write("fatal: giving up\n")
        sys.stderr.flush()
        os.abort()


class ExitAdapter(NumpyAdapter):
    def misbehave(self, case):
        os._exit(3)


class HangAdapter(NumpyAdapter):
    def misbehave(self, case):
        time.sleep(3600)


class KillSelfAdapter(NumpyAdapter):
    def misbehave(self, case):
        os.kill(os.getpid(), signal.SIGKILL)


class RaisingAdapter(NumpyAdapter):
    def misbehave(self, case):
        raise RuntimeError("adapter bug")


class WrongShapeAdapter(NumpyAdapter):
    def misbehave(self, case):
        return Observation(value=np.zeros((7, 7)), dtype="float64", shape=(7, 7))


class WrongTypeAdapter(NumpyAdapter):
    def misbehave(self, case):
        return "not an observation"


class NanAdapter(NumpyAdapter):
    def misbehave(self, case):
        value = np.full(np.broadcast_shapes(case.input.shape, case.target.shape), np.nan)
        if case.params.reduction != "none":
            value = np.asarray(np.nan)
        return Observation(value=value, dtype="float64", shape=value.shape)


class CrashWhileMinimisingAdapter(NumpyAdapter):
    """Off by one on the fault case, and dies of SIGSEGV when called on one element of it: the run is
    fine, minimising its reproducer crashes on every candidate. Writes reproducers (NumPy lines)."""

    def misbehave(self, case):
        if case.input.size == 1:
            ctypes.string_at(0)  # SIGSEGV
        return call_observed(lambda: self.compute(case) + 1.0, lambda v: (v, "float64", v.shape))

    def repro_source(self, case, api, device, part):
        return "x, t = x_values, t_values\nresult = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0) + 1.0"


class OffByOneAdapter(NumpyAdapter):
    """Off by one on every fault case, one element of it included. Writes reproducers (NumPy lines)."""

    def misbehave(self, case):
        return call_observed(lambda: self.compute(case) + 1.0, lambda v: (v, "float64", v.shape))

    def repro_source(self, case, api, device, part):
        return "x, t = x_values, t_values\nresult = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0) + 1.0"


class UnimportableScriptAdapter(OffByOneAdapter):
    """Off by one like OffByOneAdapter, but its reproducers import a framework that is not installed: a
    bisect step where the framework does not build."""

    def repro_source(self, case, api, device, part):
        return "import kl_conformance_no_such_framework\n" + super().repro_source(case, api, device, part)


class PlantedBugsAdapter(NumpyAdapter):
    """A port with planted bugs, each on the cases whose id names it: "ieee" computes xlogy(t, t) - t * x (NaN
    where the target is 0, a spec choice a profile can document), "shape" returns a reduced loss with shape
    (1,), "off" adds 1 to every value, "raise" raises an exception whose message holds the case id."""

    def run(self, case, api, device, part):
        def compute():
            if "raise" in case.id:
                raise RuntimeError(f"planted: cannot compute {case.id}")
            value = self.compute(case)
            if "ieee" in case.id:
                x, t = np.broadcast_arrays(case.input, case.target)
                with np.errstate(all="ignore"):
                    value = np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0) - t * x
            if "shape" in case.id:
                value = np.reshape(value, (1,) if value.ndim == 0 else value.shape)
            return value + 1.0 if "off" in case.id else value
        return call_observed(compute, lambda v: (v, "float64", v.shape))


class CountedTwoApiAdapter(OffByOneAdapter):
    """Off by one like OffByOneAdapter, through two APIs, writing a line per call (case id and API) to the file
    $KL_TEST_CALL_LOG names: how often each row was judged, whichever process judged it."""

    apis = (Api("numpy.kl_div"), Api("numpy.KLDivLoss"))

    def run(self, case, api, device, part):
        with open(os.environ["KL_TEST_CALL_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{case.id} {api.name}\n")
        return super().run(case, api, device, part)


class OtherHonestAdapter(NumpyAdapter):
    """The honest NumPy kl_div under another framework name: the other framework of a merged report."""

    name = "numpy-other"

    def misbehave(self, case):
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))


HOSTILE_MESSAGE = "</script><script>window.pwned=2</script><img src=x onerror=\"window.pwned=3\"><!-- '\" &amp;"


class MixedFaultAdapter(OffByOneAdapter):
    """Fault cases misbehave by their id: "nan", honest but for a NaN at the first element (one element differs,
    in its NaN pattern); "shape", a result of shape (7, 7); "raise", a RuntimeError whose message is markup
    (HOSTILE_MESSAGE); any other, off by one."""

    def misbehave(self, case):
        if "raise" in case.id:
            raise RuntimeError(HOSTILE_MESSAGE)
        if "shape" in case.id:
            return Observation(value=np.zeros((7, 7)), dtype="float64", shape=(7, 7))
        if "nan" not in case.id:
            return super().misbehave(case)

        def first_nan():
            value = np.array(self.compute(case), dtype=np.float64)
            value.reshape(-1)[0] = np.nan
            return value

        return call_observed(first_nan, lambda v: (v, "float64", v.shape))


class OffOnLateSinglesAdapter(NumpyAdapter):
    """Honest, except on one element alone whose target is over 0.2: off by one there. A call on every
    element at once shows nothing, so minimising must try the elements one by one."""

    def run(self, case, api, device, part):
        if case.input.size == 1 and float(case.target.reshape(-1)[0]) > 0.2:
            return call_observed(lambda: self.compute(case) + 1.0, lambda v: (v, "float64", v.shape))
        return super().run(case, api, device, part)


class SlowAdapter(NumpyAdapter):
    """Honest but slow (20 ms a case), so a test can kill a run halfway."""

    delay_s = 0.02


class UnloadableAdapter(NumpyAdapter):
    """A framework that cannot be imported at all: the run is `not_run`."""

    def load(self) -> None:
        from conformance.adapters.base import FrameworkUnavailable

        raise FrameworkUnavailable("No module named 'numpy_kl' (a stand-in for a framework that is not installed)")


class NoRestartAdapter(SegfaultAdapter):
    """Crashes on the fault case, and then cannot be loaded again (say, a GPU left in a bad state):
    the worker cannot be restarted. Loads once per file named by $KL_TEST_LOAD_ONCE."""

    def load(self) -> None:
        from conformance.adapters.base import FrameworkUnavailable

        marker = os.environ["KL_TEST_LOAD_ONCE"]
        if os.path.exists(marker):
            raise FrameworkUnavailable("device in a bad state after the crash")
        open(marker, "w").close()


class NoKernelAdapter(NumpyAdapter):
    """A release that lost a kernel: every fault case, and every case whose id contains "after", is answered
    "no kernel", i.e. unsupported."""

    def run(self, case, api, device, part):
        if "fault" in case.id or "after" in case.id:
            return Observation(unsupported="no kernel for this device: lost in this release")
        return super().run(case, api, device, part)


class CpuOnlyAdapter(NumpyAdapter):
    """Knows a `cuda` device that this machine does not have."""

    known_devices = ("cpu", "cuda")


class ClosingAdapter(NumpyAdapter):
    """Takes a while to close what it started (as R torch ends its R) and leaves a mark when it has."""

    def close(self) -> None:
        time.sleep(0.3)
        with open(os.environ["KL_TEST_CLOSED_MARK"], "a") as mark:
            mark.write("closed\n")


HELPER = """
import os, sys, tempfile
with open(os.environ["KL_TEST_HELPER_MARK"], "a") as mark:
    mark.write(os.environ["TMPDIR"] + "\\n")
tempfile.mkdtemp(prefix="Rtmp")  # as R makes its session directory under $TMPDIR
print("@kl\\tready", flush=True)
for line in sys.stdin:
    print("@kl\\tok", flush=True)
"""


class KilledWithHelperAdapter(KillSelfAdapter):
    """Keeps a helper process (an R stand-in, through the R frameworks' session) that writes into its own
    TMPDIR, and dies of SIGKILL on the fault case: nothing in the worker can remove what the helper left.
    Each helper appends its TMPDIR to the file named by $KL_TEST_HELPER_MARK."""

    def load(self) -> None:
        from conformance.adapters.rsession import RSession

        self._helper = RSession([sys.executable, "-c", HELPER], dict(os.environ), call_timeout_s=30,
                                tmp_root=self.scratch_dir)
        self._helper.start()

    def close(self) -> None:
        self._helper.close()


PID_HELPER = """
import sys
print("@kl\\tready", flush=True)
for line in sys.stdin:
    print("@kl\\tok", flush=True)
"""


class HangWithHelperAdapter(HangAdapter):
    """Keeps a helper process (an R stand-in, through the R frameworks' session) and hangs on the fault case.
    Writes "WORKER_PID HELPER_PID" to the file named by $KL_TEST_PIDS once loaded."""

    def load(self) -> None:
        from conformance.adapters.rsession import RSession

        self._helper = RSession([sys.executable, "-c", PID_HELPER], dict(os.environ), call_timeout_s=30,
                                tmp_root=self.scratch_dir)
        self._helper.start()
        with open(os.environ["KL_TEST_PIDS"], "w") as mark:
            mark.write(f"{os.getpid()} {self._helper._process.pid}\n")

    def close(self) -> None:
        self._helper.close()


class HangWhileToldAdapter(NumpyAdapter):
    """Hangs on the fault case while $KL_TEST_HANG is set, else honest: a run that cannot finish, then its
    --resume that can."""

    def run(self, case, api, device, part):
        if "fault" not in case.id:
            return super().run(case, api, device, part)
        if os.environ.get("KL_TEST_HANG"):
            time.sleep(3600)
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))


class OlderThanItsProfileAdapter(NumpyAdapter):
    """Honest, at release 0.9, carrying a profile that says the adapter supports 1.10 and later."""

    profile = {"framework": "numpy-test", "oldest_release": "1.10", "deviations": []}

    def version(self) -> str:
        return "0.9"


class VersionedAdapter(NumpyAdapter):
    """Honest, with the version $KL_TEST_VERSION says (another release of the same framework)."""

    def version(self) -> str:
        return os.environ.get("KL_TEST_VERSION", "1.0")


class ModalAdapter(OffByOneAdapter):
    """An honest NumPy kl_div with modes beside eager: `shifted` (its "compiled" call is off by one on every
    fault case, which eager is not), `forward-only` (no gradients), and `missing` (never usable here: the
    package it would need is not installed). Its reproducers carry the mode they were written in."""

    modes = (Mode("shifted", "the call wrapped in a planted shift on the fault cases"),
             Mode("forward-only", "an exported graph without autograd", gradients=False),
             Mode("missing", "needs a package this machine lacks"))

    def mode_unavailable(self, mode: str) -> str | None:
        return "kl_conformance_no_such_runtime is not installed" if mode == "missing" else None

    def run(self, case, api, device, part, mode=EAGER):
        if mode == "shifted" and "fault" in case.id:
            return self.misbehave(case)
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))

    def repro_source(self, case, api, device, part, mode=EAGER):
        shift = " + 1.0" if mode == "shifted" else ""
        return (f"# mode: {mode}\nx, t = x_values, t_values\n"
                f"result = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0){shift}")


def _old_kl_div(input, target, reduction="mean"):
    """kl_div of an older release of the stand-in framework: no log_target argument (the target is always
    probabilities), as Paddle 2.6's. Honest float64 NumPy, the spec's formula."""
    x, t = np.broadcast_arrays(np.asarray(input, dtype=np.float64), np.asarray(target, dtype=np.float64))
    with np.errstate(all="ignore"):
        loss = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0)
    if reduction == "batchmean":
        return np.asarray(loss.sum() / (loss.shape[0] if loss.ndim else 1))
    reduced = {"none": lambda: loss, "sum": lambda: np.asarray(loss.sum()), "mean": lambda: np.asarray(loss.mean())}
    if reduction not in reduced:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduced[reduction]()


class OldReleaseAdapter(Adapter):
    """A stand-in framework `klfake` in an older release, made through the real call machinery (`call`, the
    base `run`): its `klfake.kl_div` has no log_target argument, and its `klfake.losses` module does not exist
    yet. The harness learns both from the loaded module, as it does for Paddle 2.6 and optax 0.1.7."""

    name = "klfake"
    apis = (Api("klfake.kl_div"), Api("klfake.losses.kl_div"))
    known_devices = ("cpu",)

    def load(self) -> None:
        module = types.ModuleType("klfake")
        module.__version__ = "0.9"
        module.kl_div = _old_kl_div
        module.float32, module.float64 = np.float32, np.float64  # no float16 yet, as OneFlow 0.8.0 has no int16
        sys.modules["klfake"] = module  # what `import klfake` would leave: ApiCall finds the API there

    def version(self) -> str:
        return sys.modules["klfake"].__version__

    def devices(self) -> tuple[str, ...]:
        return ("cpu",)

    def dtype_unavailable(self, dtype: str) -> str | None:
        return None if hasattr(sys.modules["klfake"], dtype) else f"klfake 0.9 has no dtype klfake.{dtype}"

    def build(self, case: Case, device: str):
        klfake = sys.modules["klfake"]
        return (case.input.astype(getattr(klfake, case.dtype.input)),
                case.target.astype(getattr(klfake, case.dtype.target)))

    def call(self, case: Case, api: Api) -> ApiCall:
        return ApiCall.function(api.name, "x", "t", reduction=case.params.reduction,
                                log_target=case.params.log_target)

    def to_numpy(self, result):
        value = np.asarray(result)
        return value.astype(np.float64), "float64", value.shape

    def repro_source(self, case, api, device, part):
        return f"x, t = x_values, t_values\nresult = {self.call(case, api).source()}"


class NoApiAdapter(OldReleaseAdapter):
    """The stand-in framework in a release that has none of the APIs the adapter runs."""

    apis = (Api("klfake.losses.kl_div"), Api("klfake.losses.kl_div_with_log_targets"))


class NoCacheOptionAdapter(OldReleaseAdapter):
    """The stand-in framework's kl_div, from a release that does not take one of the harness's own options (as
    JAX 0.4.13 has no jax_compilation_cache_dir), which the run notes and goes on without."""

    apis = (Api("klfake.kl_div"),)

    def load(self) -> None:
        super().load()
        self.degraded("klfake 0.9 does not take the option compile_cache_dir: the run goes on without it")


class ReleasedAdapter(NumpyAdapter):
    """One framework ("numpy-released") at the release $KL_TEST_VERSION names (1.0 unless set), whose releases differ
    on the cases whose id says how: "worse" is honest in 1.x and off by one from 2.0 on; "fixed" is off by one in
    1.x and honest from 2.0; "changes" is off by one in 1.x and raises from 2.0 (its message markup:
    HOSTILE_MESSAGE); "goes" is honest in 1.x and has no kernel from 2.0 (unsupported); "off" is off by one in
    every release; any other case is honest in every release."""

    name = "numpy-released"

    def version(self) -> str:
        return os.environ.get("KL_TEST_VERSION", "1.0")

    def run(self, case, api, device, part):
        newer = not self.version().startswith("1.")

        def compute():
            if newer and "changes" in case.id:
                raise RuntimeError(HOSTILE_MESSAGE)
            if newer and "goes" in case.id:
                raise NotImplementedError(f"no kernel for {case.id}")
            off = "off" in case.id or ("worse" in case.id if newer else ("fixed" in case.id or "changes" in case.id))
            return self.compute(case) + (1.0 if off else 0.0)

        return call_observed(compute, lambda v: (v, "float64", v.shape),
                             is_no_kernel=lambda exc: isinstance(exc, NotImplementedError))


class _Unconvertible:
    """A value NumPy cannot read: converting it raises, as a framework's tensor of a dtype NumPy lacks does."""

    def __array__(self, dtype=None, copy=None):
        raise TypeError("cannot convert this tensor to a NumPy array")


class GarbageValueAdapter(NumpyAdapter):
    """Fault cases return a value the harness cannot judge, chosen by their id: "object", an object array (of
    Python objects, as a framework's list of tensors becomes); "lies", a value whose stated shape is not its
    own; "unconvertible", a value that raises when converted to NumPy; "complex", complex numbers; any other,
    a list of strings."""

    def misbehave(self, case):
        honest = np.asarray(self.compute(case))
        if "object" in case.id:
            value = np.empty(honest.shape, dtype=object)
            value[...] = None if honest.ndim == 0 else [object()] * honest.shape[-1]
            return Observation(value=value, dtype="float64", shape=honest.shape)
        if "lies" in case.id:
            return Observation(value=np.zeros((3, 5)), dtype="float64", shape=honest.shape)
        if "unconvertible" in case.id:
            return Observation(value=_Unconvertible(), dtype="float64", shape=honest.shape)
        if "complex" in case.id:
            return Observation(value=honest + 1j, dtype="complex128", shape=honest.shape)
        return Observation(value=["a", "b"], dtype="float64", shape=(2,))


class TwoFormsAdapter(OffByOneAdapter):
    """A function and a module class that calls it (one implementation), beside a second function of its own:
    one defect for the first two, another for the third."""

    apis = (Api("numpy.kl_div"), Api("numpy.KLDivLoss", implementation="numpy.kl_div"), Api("numpy.kl_div_other"))


class Float32Float64OnlyAdapter(NumpyAdapter):
    """Honest for float32 and float64 arguments of one dtype; raises TypeError for any other call, as a framework
    whose documentation says its kl_div takes float32 and float64 only, both arguments of one dtype."""

    def run(self, case, api, device, part):
        if case.dtype.is_mixed or case.dtype.input not in ("float32", "float64"):
            return Observation(exception_type="TypeError", exception_message="dtype not supported")
        return super().run(case, api, device, part)


class SegvInCallAdapter(NumpyAdapter):
    """Kills its own process with SIGSEGV inside its call on the fault case, after printing to stderr, as a
    framework's kernel does when it dereferences a bad pointer."""

    def misbehave(self, case):
        sys.stderr.write("kernel: kl_div_forward read past the end of target\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)


class SameShapeProfileAdapter(NumpyAdapter):
    """Honest, and carrying a profile that documents one deviation: shapes must be the same (no broadcasting)."""

    profile = {"framework": "numpy-test", "deviations": [
        {"id": "same-shape", "apis": ["numpy.kl_div"], "set": {"shapes.broadcasting": "none"}, "rationale": "r",
         "basis": "docs", "reference": "https://example.org/docs"}]}


class Float32ComputationAdapter(NumpyAdapter):
    """Honest, but casts both arguments to float32 first whatever their dtypes, and answers in float32 (as Keras'
    loss classes compute in keras.config.floatx())."""

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        narrowed = types.SimpleNamespace(input=case.input.astype(np.float32), target=case.target.astype(np.float32),
                                         params=case.params)
        return call_observed(lambda: np.asarray(self.compute(narrowed), dtype=np.float32),
                             lambda v: (v.astype(np.float64), "float32", v.shape))


class DeclaredFloat32ComputationAdapter(Float32ComputationAdapter):
    """The same, carrying a profile that documents it: the spec's choice dtypes.computation = float32."""

    profile = {"framework": "numpy-test", "deviations": [
        {"id": "computes-in-float32", "apis": ["numpy.kl_div"], "set": {"dtypes.computation": "float32"},
         "rationale": "r", "basis": "docs", "reference": "https://example.org/docs"}]}


class WrongFloat32ComputationAdapter(DeclaredFloat32ComputationAdapter):
    """Declares the float32 computation, and answers it off by one: what the profile documents is float32's answer,
    not any answer in float32."""

    def compute(self, case: Case) -> np.ndarray:
        return super().compute(case) + 1


class AcceleratorAdapter(NumpyAdapter):
    """Has a `gpu` beside the cpu, which one process claims whole (as JAX preallocates its memory): each worker
    that loads appends a line to the file named by $KL_TEST_LOADS."""

    known_devices = ("cpu", "gpu")

    def load(self) -> None:
        with open(os.environ["KL_TEST_LOADS"], "a") as mark:
            mark.write("loaded\n")

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "gpu")


class RefusingWordsAdapter(NumpyAdapter):
    """Answers the fault case as unsupported, in the words the harness opens its own refusals with."""

    def misbehave(self, case):
        return Observation(unsupported="refused: no float64 kernel on this device")


class NoGradientAdapter(OldReleaseAdapter):
    """klfake again, whose autograd gives no gradient (None) for any argument: each part's missing gradient."""

    apis = (Api("klfake.kl_div", grads=("input", "target")),)

    def gradient(self, case: Case, api: Api, device: str, part: str):
        return None

