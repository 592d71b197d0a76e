"""Benchmark: the harness against a bare loop over the same framework calls, and the reference.

Run inside one framework's environment (tox -m bench runs it in every framework's):

    python bench/bench.py --framework torch

(a) bare: the framework API called on exactly the default suite's inputs, already
    converted, every API on cpu, in one process, plus each gradient part through the
    framework's autograd (those build their own tensors with requires_grad), each result
    read back to NumPy: a call has not computed anything until its result can be read
    (OneFlow runs ops asynchronously; reading is what waits for them). The floor.
(a0) first pass: the bare loop's untimed first pass, in the same fresh process: the framework's
    first-call setup, which any fresh process pays, the run's worker included.
(b) harness: `run_conformance` on the same cases end to end (worker process,
    conversion, reference, comparison, explanation, results file), measured both
    in total and after its worker has started (the framework's import is paid once);
    cold (every expectation computed) and warm (expectations from the reference
    cache, as for the second framework of a matrix or the next CI run).
(c) whole run: `kl-conformance run --framework NAME` as a user types it (a fresh interpreter,
    the run, its reports and its reproducers), against the floor of a fresh interpreter importing
    NumPy (start), the framework's import and (a); cold (empty reference cache) and warm, with the default --jobs (one worker for an eager
    run), and warm again with a worker per core: what spreading the cases over the cores saves.
(a') observed: the same calls through `Adapter.run` in one process, i.e. (a) plus what
    recording a result needs (input conversion, warnings, exceptions as data).
Also the float64 reference on 16M elements against a plain NumPy elementwise pass
over the same arrays, and per value family (softmax, identical, unnormalized, tiny,
large; both target spaces) against the same plain pass: the issue's targets are every
family within 2x of softmax and the whole reference within 10x of the plain pass.
`--reference-only` measures just the reference (no framework needed):

    python bench/bench.py --reference-only

`--exhaustive` measures the scale figures instead: the exhaustive suite with two samples
(`kl-conformance run --exhaustive --samples 2 --no-repro`) as a whole run, cold and warm, with
its peak RSS, against import + the bare loop over the same calls (each is a long run; the
issue's target is 2x):

    python bench/bench.py --framework torch --exhaustive

`--mode NAME` measures a compiled or graph mode: its run of the mode suite (`--suite mode-slice` for the
slice) with one worker against a bare loop, in a fresh process, that loads the framework and compiles and
calls the same signatures once, each cold (empty compile caches) and warm (the caches the cold pass filled),
plus the start of a fresh interpreter that imports NumPy, which the run's worker pays too; the issue's target
is 1.5x:

    python bench/bench.py --framework torch --mode inductor

`--plugin` measures the pytest plugin against the CLI with the same gate: a session of the default suite
(`pytest --kl-framework NAME --kl-baseline B`, in one process and under `-n 2`) against `kl-conformance run
--framework NAME --baseline B --fail-on-new`, B an earlier run of the same suite, the reference cache warm for
both (the issue's target: within 1.3x). Where this environment has Hypothesis, whose pytest plugin every
session then loads, the sessions are measured without it, and one with it beside them:

    python bench/bench.py --framework torch --plugin

Prints one line per figure; no figure is asserted.

Measures and prints only: no test runs it, and nothing in the harness imports it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import math
import multiprocessing
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from conformance.adapters.base import FrameworkUnavailable
from conformance.adapters.registry import get_adapter
from conformance.cases.families import FAMILIES
from conformance.cases.generate import DEFAULT_SEED, build_case, generate_cases, generated_keys
from conformance.core.case import Case, DtypePair, Params
from conformance.core.model import EAGER
from conformance.core.specload import load_spec
from conformance.judge.cachebuilds import MAX_CACHE_BYTES
from conformance.reference.forward import expected_forward
from conformance.run.jobs import available_cores
from conformance.run.runner import RunOptions, run_conformance

from loops import bare_loop, fresh_compiled_loop, observed_loop  # beside this file: a script's folder is on the path


def harness(framework: str, cases: list[Case], spec, cache_dir: Path | None,
            mode: str = EAGER) -> tuple[float, float, int]:
    """Seconds for a whole run, seconds after the worker was up, and results written."""
    adapter = get_adapter(framework)
    adapter.load()
    cpu = adapter.devices()[0]  # the worker runs the calls; this process only asks the device's name
    getattr(adapter, "close", lambda: None)()
    with tempfile.TemporaryDirectory() as out:
        started = {}
        start = time.perf_counter()

        def first_result(case, result):
            started.setdefault("t", time.perf_counter())
        summary = run_conformance(spec, framework, cases, out, RunOptions(devices=(cpu,), modes=(mode,),
                                                                          cache_dir=cache_dir, timeout_s=600),
                                  on_result=first_result)
        total = time.perf_counter() - start
    steady = total - (started.get("t", start) - start)
    return total, steady, sum(summary.counts.values())


def import_seconds(framework: str, repeat: int) -> float:
    """Best-of-`repeat` seconds for loading the framework (the adapter's load(): its import) in a fresh process."""
    code = ("import time; from conformance.adapters.registry import get_adapter; a = get_adapter(%r); "
            "t = time.perf_counter(); a.load(); print(time.perf_counter() - t)" % framework)
    with tempfile.TemporaryDirectory() as here:  # not the checkout: its conformance/ would shadow the package
        return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=here,
                                        check=True).stdout.split()[-1]) for _ in range(repeat))


def start_seconds(repeat: int) -> float:
    """Best-of-`repeat` wall seconds of a fresh interpreter that imports NumPy and exits: what any loop over
    NumPy-built inputs pays before it loads its framework, as a whole run and a run's worker pay it too."""
    with tempfile.TemporaryDirectory() as here:
        best = math.inf
        for _ in range(max(repeat, 3)):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import numpy"], cwd=here, check=True)
            best = min(best, time.perf_counter() - start)
        return best


def whole_run(framework: str, cache_dir: Path, options: tuple[str, ...] = ()) -> tuple[float, int, float]:
    """Wall seconds of `kl-conformance run --framework NAME` on the default suite (or as `options` select), as
    a user types it: interpreter start, run, reports and reproducers. Returns the seconds, the reproducers
    written, and the peak RSS in MB of the run's largest process (the CLI or its worker).

    A small wrapper process starts the run and reads that peak: the peak getrusage gives for a child
    starts at its parent's resident size (fork and vfork share the parent's pages until exec), so a
    run started from this process, which holds the suite, would report this process's memory."""
    wrapper = ("import resource, subprocess, sys, time; start = time.perf_counter(); "
               "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
               "print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    with tempfile.TemporaryDirectory() as here:
        measured = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "conformance", "run",
                                   "--framework", framework, "--out", "run", "--no-progress", "--cache-dir",
                                   str(cache_dir), *options], cwd=here, check=True, capture_output=True, text=True)
        seconds, peak_kb = measured.stdout.split()[-2:]
        return float(seconds), len(list((Path(here) / "run" / "repro").glob("*"))), int(peak_kb) / 1024


REFERENCE_FAMILIES = ("softmax", "identical", "unnormalized", "tiny", "large")


def reference_vs_numpy(n: int, repeat: int) -> tuple[float, float]:
    """Best seconds of the reference (reduction none, float64) and of t * (log t - x) on n elements."""
    rng = np.random.default_rng(0)
    x = rng.normal(-2.0, 1.0, n)
    t = rng.uniform(0.0, 1.0, n)
    return _best_against_plain({"bench": (x, t)}, False, repeat)["bench"]


def reference_families(n: int, repeat: int, log_target: bool) -> dict[str, tuple[float, float]]:
    """Best seconds of the reference and of the plain pass per value family, on n elements (rows of 16)."""
    rng = np.random.default_rng(1)
    shape = (n // 16, 16)
    draws = {name: FAMILIES[name].draw(rng, shape, shape, log_target) for name in REFERENCE_FAMILIES}
    return _best_against_plain(draws, log_target, repeat)


def _best_against_plain(draws: dict, log_target: bool, repeat: int) -> dict[str, tuple[float, float]]:
    """Per draw, best CPU seconds of expected_forward and of the plain pass, timed alternately.

    CPU time of this process (user + system: page faults count), not wall time: both are
    single-threaded NumPy, and on a shared machine wall time mostly measures the other
    processes. Alternating gives both the same conditions. The plain pass is
    t * (log t - x), or exp(t) * (t - x) with log_target, over that draw's arrays.
    """
    spec = load_spec()
    best = {name: [float("inf"), float("inf")] for name in draws}
    for attempt in range(repeat + 1):  # attempt 0 warms up (first-call setup, page faults): not timed
        for name, (x, t) in draws.items():
            case = Case(id="bench", params=Params("none", log_target), input=x, target=t,
                        dtype=DtypePair("float64", "float64"), family=name)
            with np.errstate(all="ignore"):
                start = time.process_time()
                _ = np.exp(t) * (t - x) if log_target else t * (np.log(t) - x)
                plain = time.process_time() - start
            start = time.process_time()
            expected_forward(case, spec)
            reference = time.process_time() - start
            if attempt:
                best[name] = [min(best[name][0], reference), min(best[name][1], plain)]
    return {name: (ref, plain) for name, (ref, plain) in best.items()}


def print_reference(n: int, repeat: int) -> None:
    """The reference's lines: the whole reference and each value family against the plain pass."""
    ref_s, plain_s = reference_vs_numpy(n, repeat)
    label = f"{n / 2**20:g}M" if n % 2**20 == 0 else str(n)
    print(f"reference {label:10s} {ref_s:.3f} s vs plain numpy {plain_s:.3f} s (CPU): ratio {ref_s / plain_s:.1f}")
    for log_target in (False, True):
        found = reference_families(n, repeat, log_target)
        softmax_s = found["softmax"][0]
        worst = max(found, key=lambda name: found[name][0])
        print(f"reference families   log_target={int(log_target)} (CPU): "
              + ", ".join(f"{name} {ref:.2f} s ({ref / plain:.1f}x plain)" for name, (ref, plain) in found.items())
              + f"; slowest/softmax {found[worst][0] / softmax_s:.2f} ({worst})")
    print(f"peak RSS             {peak_rss_mb():.0f} MB with the reference")


EXHAUSTIVE_SAMPLES = 2


def exhaustive(framework: str, spec) -> int:
    """The scale figures: the exhaustive suite's whole run, cold and warm, against import + its bare loop."""
    cases = list(generate_cases(spec, DEFAULT_SEED, exhaustive=True, samples=EXHAUSTIVE_SAMPLES))
    try:
        bare_s, calls, _ = bare_loop(framework, cases, repeat=1)
    except FrameworkUnavailable as exc:
        print(f"framework            {framework} is not installed here; nothing measured: {exc}")
        return 0
    count = len(cases)
    del cases  # the runs below are separate processes; this one should not hold the suite meanwhile
    import_s, start_s = import_seconds(framework, 3), start_seconds(3)
    options = ("--exhaustive", "--samples", str(EXHAUSTIVE_SAMPLES), "--no-repro")
    with tempfile.TemporaryDirectory() as cache_dir:
        cold_s, _, cold_mb = whole_run(framework, Path(cache_dir), options)
        cache_mb = sum(p.stat().st_size for p in Path(cache_dir).glob("reference-*")) / 2**20
        warm_s, _, warm_mb = whole_run(framework, Path(cache_dir), options)
    floor_s = start_s + import_s + bare_s
    print(f"framework            {framework} (python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"exhaustive suite     {count} cases (--samples {EXHAUSTIVE_SAMPLES}), {calls} runnable calls")
    print(f"(a) bare loop        {bare_s:.1f} s  ({1e6 * bare_s / max(calls, 1):.1f} us per call)")
    print(f"start, import        {start_s:.3f} s, {import_s:.3f} s")
    print(f"(c) whole run        `kl-conformance run --framework {framework} {' '.join(options)}`: {cold_s:.1f} s cold, "
          f"{warm_s:.1f} s warm; (c)/(start + import + a) {cold_s / floor_s:.1f} cold, {warm_s / floor_s:.1f} warm")
    print(f"peak RSS             {cold_mb:.0f} MB cold, {warm_mb:.0f} MB warm: the run's largest process")
    print(f"reference cache      {cache_mb:.0f} MB after the cold run (a build stops growing at "
          f"{MAX_CACHE_BYTES // 2**20} MB)")
    return 0


def peak_rss_mb() -> float:
    """This process's peak RSS in MB (the reference bench's, which holds its draws)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def mode_bench(framework: str, mode: str, spec, suite: str) -> int:
    """A compiled or graph mode: its run of `suite` against a bare loop that loads the framework and compiles and
    calls the same signatures in a fresh process, each once with empty compile caches (cold) and once with the
    caches that pass filled (warm), both one worker (the run with --jobs 1). An eager run first fills the
    reference cache, so both runs of the mode compute no expectation: what is compared is compiling and calling."""
    cases = [build_case(key, DEFAULT_SEED) for _, key in generated_keys(spec, suite=suite)]
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as loop_cache, tempfile.TemporaryDirectory() as run_cache:
        loops = []
        for _ in ("cold", "warm"):
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as fresh:
                try:
                    loops.append(fresh.submit(fresh_compiled_loop, framework, suite, mode, loop_cache).result())
                except FrameworkUnavailable as exc:
                    print(f"framework            {framework} is not installed here; nothing measured: {exc}")
                    return 0
        harness(framework, cases, spec, Path(run_cache))  # the expectations, in the reference cache: not compiles
        runs = [harness(framework, cases, spec, Path(run_cache), mode) for _ in ("cold", "warm")]
    calls, start_s = loops[0][3], start_seconds(3)
    print(f"framework            {framework} (python {sys.version.split()[0]}, numpy {np.__version__}), mode {mode}")
    print(f"start                {start_s:.3f} s: a fresh interpreter that imports NumPy, which the loop's process "
          f"and the run's worker pay alike")
    print(f"suite                {suite}: {len(cases)} cases, {calls} calls sent (forward and gradients), "
          f"{runs[0][2]} results")
    for name, (load_s, first_s, best_s, _), (total_s, steady_s, _) in zip(("cold", "warm"), loops, runs):
        floor_s = start_s + load_s + first_s
        print(f"(a) loop, {name}        {floor_s:.3f} s: start, load {load_s:.3f} s, every call once {first_s:.3f} s "
              f"(compiled again: {best_s:.3f} s, {1e6 * best_s / max(calls, 1):.1f} us per call)")
        print(f"(b) harness, {name}     {total_s:.3f} s total, {steady_s:.3f} s after the worker started, one worker")
        print(f"ratio b/a, {name}       {total_s / floor_s:.2f}")
    return 0


def plugin_bench(framework: str, repeat: int) -> int:
    """The plugin's session against the CLI's run, the same gate over the same suite, best of `repeat` each."""
    def seconds(command: list[str], here: str, ok: tuple[int, ...]) -> float:
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            done = subprocess.run(command, cwd=here, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            best = min(best, time.perf_counter() - start)
            if done.returncode not in ok:
                raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
        return best

    with tempfile.TemporaryDirectory() as here:
        Path(here, "test_own.py").write_text("def test_own():\n    assert True\n")
        cli = [sys.executable, "-m", "conformance", "run", "--framework", framework, "--no-progress"]
        try:  # the accepted run, which also fills the reference cache as a second run of the day finds it
            subprocess.run([*cli, "--out", "base"], cwd=here, check=True, capture_output=True)
        except subprocess.CalledProcessError as exc:
            print(f"framework            {framework} did not run here; nothing measured: {exc.stderr[-300:]!r}")
            return 0
        gated_cli = seconds([*cli, "--out", "run", "--force", "--baseline", "base", "--fail-on-new"], here, (0,))
        session = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kl-framework", framework,
                   "--kl-baseline", "base"]
        # Hypothesis, where this environment has it, adds its own pytest plugin to every session, at a cost per
        # item that is Hypothesis's, not kl-conformance's (which does not depend on it): measured apart
        hypothesis = importlib.util.find_spec("_hypothesis_pytestplugin") is not None
        own = [*session, "-p", "no:hypothesispytest"] if hypothesis else session
        one = seconds(own, here, (0,))
        two = seconds([*own, "-n", "2"], here, (0,))
        with_hypothesis = seconds(session, here, (0,)) if hypothesis else None
    print(f"framework            {framework} (python {sys.version.split()[0]}), default suite, --baseline of the "
          f"same suite, warm reference cache, best of {repeat}")
    print(f"(c) CLI, gated       {gated_cli:.2f} s: `kl-conformance run --baseline B --fail-on-new` with its reports")
    print(f"(p) plugin           {one:.2f} s one process, {two:.2f} s under -n 2: `pytest --kl-framework "
          f"{framework} --kl-baseline B`")
    print(f"ratio p/c            {one / gated_cli:.2f} one process, {two / gated_cli:.2f} under -n 2")
    if with_hypothesis is not None:
        print(f"(h) plugin, with Hypothesis's pytest plugin loaded too (this environment has it): "
              f"{with_hypothesis:.2f} s one process, ratio h/c {with_hypothesis / gated_cli:.2f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference-elements", type=int, default=16 * 2**20)
    parser.add_argument("--reference-only", action="store_true", help="measure only the reference (no framework)")
    parser.add_argument("--mode", default=EAGER,
                        help="a compiled or graph mode: its run of --suite against its bare compiled loop")
    parser.add_argument("--suite", default="modes", choices=("modes", "mode-slice"),
                        help="with --mode: the suite measured (default: the mode suite)")
    parser.add_argument("--exhaustive", action="store_true",
                        help="measure the exhaustive suite (two samples) end to end instead of the default suite")
    parser.add_argument("--plugin", action="store_true",
                        help="measure the pytest plugin's session against the CLI's run with the same gate")
    args = parser.parse_args(argv)
    if args.plugin:
        return plugin_bench(args.framework or parser.error("--plugin needs --framework"), args.repeat)
    if args.reference_only:
        print(f"reference            python {sys.version.split()[0]}, numpy {np.__version__}")
        print_reference(args.reference_elements, args.repeat)
        return 0
    if not args.framework:
        parser.error("--framework is required (or --reference-only)")

    spec = load_spec()
    if args.exhaustive:
        return exhaustive(args.framework, spec)
    if args.mode != EAGER:
        return mode_bench(args.framework, args.mode, spec, args.suite)
    cases = list(generate_cases(spec, DEFAULT_SEED))
    try:
        bare_s, calls, first_s = bare_loop(args.framework, cases, args.repeat)
    except FrameworkUnavailable as exc:  # R torch: no registry installs it, so its bench may find none
        print(f"framework            {args.framework} is not installed here; nothing measured: {exc}")
        return 0
    observed_s = observed_loop(args.framework, cases, args.repeat)
    total_s, steady_s, results = harness(args.framework, cases, spec, cache_dir=None)
    with tempfile.TemporaryDirectory() as cache_dir:
        harness(args.framework, cases, spec, Path(cache_dir))  # fills the cache, as another framework's run would
        warm_total_s, warm_steady_s, _ = harness(args.framework, cases, spec, Path(cache_dir))
    import_s, start_s = import_seconds(args.framework, args.repeat), start_seconds(args.repeat)
    with tempfile.TemporaryDirectory() as cache_dir:
        cli_cold_s, reproducers, cold_mb = whole_run(args.framework, Path(cache_dir))
        cli_warm_s, _, warm_mb = whole_run(args.framework, Path(cache_dir))
        cli_many_s, _, _ = whole_run(args.framework, Path(cache_dir), ("--jobs", str(available_cores())))
    floor_s = start_s + import_s + bare_s
    print(f"framework            {args.framework} (python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"default suite        {len(cases)} cases, {calls} runnable calls (forward and gradients), {results} results")
    print(f"(a) bare loop        {bare_s:.3f} s  ({1e6 * bare_s / max(calls, 1):.1f} us per call)")
    print(f"(a0) first pass      {first_s:.3f} s: the bare loop's untimed first pass in a fresh process "
          f"({first_s / bare_s:.1f}x (a): first-call setup, which the run's worker pays once too)")
    print(f"(a') observed loop   {observed_s:.3f} s: the same calls through Adapter.run in process "
          f"(ratio {observed_s / bare_s:.2f})")
    print(f"(b) harness, cold    {total_s:.3f} s total, {steady_s:.3f} s after the worker started "
          f"({results / total_s:,.0f} results/s); no reference cache")
    print(f"(b) harness, warm    {warm_total_s:.3f} s total, {warm_steady_s:.3f} s after the worker started "
          f"({results / warm_total_s:,.0f} results/s); expectations from the reference cache")
    print(f"ratio b/a, cold      {total_s / bare_s:.1f} total, {steady_s / bare_s:.1f} after start")
    print(f"ratio b/a, warm      {warm_total_s / bare_s:.1f} total, {warm_steady_s / bare_s:.1f} after start")
    print(f"start                {start_s:.3f} s: a fresh interpreter that imports NumPy, as a whole run starts")
    print(f"import               {import_s:.3f} s to load {args.framework} in a fresh process")
    print(f"(c) whole run        `kl-conformance run --framework {args.framework}`, {reproducers} reproducers: "
          f"{cli_cold_s:.2f} s cold, {cli_warm_s:.2f} s warm; (c)/(start + import + a) {cli_cold_s / floor_s:.2f} cold, "
          f"{cli_warm_s / floor_s:.2f} warm")
    print(f"(c) every core       --jobs {available_cores()}: {cli_many_s:.2f} s warm, against {cli_warm_s:.2f} s with "
          f"the default (one worker where every call is eager) ({cli_many_s / cli_warm_s:.2f}x)")
    print(f"peak RSS             {max(cold_mb, warm_mb):.0f} MB: the largest process of the whole runs (c)")
    print_reference(args.reference_elements, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
