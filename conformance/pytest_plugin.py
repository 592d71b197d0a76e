"""kl-conformance's pytest plugin: the suite as test items of a maintainer's own pytest session.

Registered through the `pytest11` entry point, so an environment with kl-conformance installed has it. Without
--kl-framework it adds nothing, and loading it imports nothing but pytest and the options' table: the harness
is imported when the option is given, and a framework only ever in the harness's worker process, as
`kl-conformance run` does. Its --kl-* options are the CLI's, built from one table (conformance/options.py) and
checked as the CLI checks them when the suite is set up: a bad value is one line and pytest's usage exit code
(4), before any item runs.

One item per (case, API, device, mode, part), named by the case id (the mode in its brackets where it is not
eager; --kl-mode, repeatable, picks the modes, default eager). Items are judged in batches, as `run` judges
them: each pytest process judges its share of the collected cases in one run of the runner
(conformance/run/runner.py) when the first item of that share is reached, in one worker per pytest process,
so a crash costs one case, never the session. The verdict decides the outcome: a pass passes, an unsupported
call is skipped, a divergence the profile documents or --kl-known accepts (or, with --kl-baseline, unchanged
since the baseline) is xfailed with the reason, and any other divergence fails, showing the verdict, cause,
got against expected and the `kl-conformance repro` command. At the end the CLI's gates decide over every row
the session wrote (a stale known entry, a result lost since the baseline) and fail the session as `run` exits
1. Under pytest-xdist the controller finds the devices once, hands each worker a share of whole cases (a
scheduler that keeps a share's items on one worker, so every row is judged once), and decides the gates.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from conformance.pytest_items import (SHARES_PER_WORKER, SUITE_PREFIX, Call, FrameworkItems, deal_shares,
                                     item_name, lean_protocol, node_id, share_scheduling)
from conformance.pytest_process import early_workers, new_pool

_WORKER_INPUT = "kl_conformance"
_DESELECTED = "deselected"  # a file in the shared directory: some items of the suite did not run


def pytest_addoption(parser) -> None:
    from conformance.options import OPTIONS, PLUGIN_OPTIONS

    group = parser.getgroup("kl-conformance", "kl-conformance: the kl_div conformance suite as test items")
    group.addoption("--kl-framework", action="append", default=[], metavar="NAME",
                    help="run the suite against this framework: a registered name (torch), "
                         "package.module:AdapterClass or package.module:function (repeatable). Without it the "
                         "plugin adds nothing")
    group.addoption("--kl-fail-on-own", action="store_true", default=False,
                    help="with --kl-like and --kl-like-run: a divergence the recorded run shares xfails; the "
                         "port's own undocumented ones fail, and so does the session (as run --fail-on-own)")
    helps = {"seed": "draw of the generated values (default: the CLI's)",
             "known": "known-findings file: the divergences it accepts xfail; an entry that matches nothing is "
                      "stale and fails the session",
             "baseline": "an earlier run: a divergence unchanged since it xfails; a new or changed one fails, and "
                         "so does a result lost since (--fail-on-new)",
             "timeout_s": "time limit of one case (default: the CLI's)",
             "memory_budget_mb": "refuse a case estimated to need more memory (default: the CLI's)"}
    for name in PLUGIN_OPTIONS:  # the CLI's options, as --kl-*: checked by the same table when the suite is set up
        OPTIONS[name].add_to_plugin(group.addoption, help=helps.get(name))


# options under which pytest only shows something (its help, the markers, the fixtures): no suite is set up
_SHOWING = ("help", "markers", "showfixtures", "show_fixtures_per_test")


def pytest_configure(config) -> None:
    names = config.getoption("kl_framework")
    if names and not any(config.getoption(name, False) for name in _SHOWING):
        config.pluginmanager.register(_Suite(config, early_workers(names)), "kl-conformance-suite")


class _Suite:
    """The session's suite: the checked options, the frameworks' devices, and the rows judged so far."""

    def __init__(self, config, early: dict) -> None:
        from conformance.core.errors import ConformanceError, unusable_path
        from conformance.options import PLUGIN, spelled

        self.config = config
        self.dir: Path | None = None
        self.pools: dict = early  # framework -> its WorkerPool, launched as the plugin was configured
        self.cache = None  # the reference cache of the judges made while the workers load
        self.judges: dict = {}  # case id -> its judge, made then: the first run to judge the case takes it
        self.controller = False
        try:
            self._setup(config)
        except ConformanceError as exc:
            self._discard()
            # the CLI's option names, where the line names one, as this plugin spells them
            exc.where, exc.problem, exc.fix = (spelled(text, PLUGIN) if text else text
                                               for text in (exc.where, exc.problem, exc.fix))
            raise pytest.UsageError(f"kl-conformance: {exc.render()}") from None
        except BaseException as exc:
            self._discard()
            problem = unusable_path(exc, config.invocation_params.args)
            if problem is not None:
                raise pytest.UsageError(f"kl-conformance: {spelled(str(problem), PLUGIN)}") from None
            raise

    def _setup(self, config) -> None:
        from conformance import api
        from conformance.adapters.registry import get_adapter
        from conformance.cases.generate import DEFAULT_SEED
        from conformance.core.errors import UsageError
        from conformance.core.known import load_known
        from conformance.options import OPTIONS, PLUGIN_OPTIONS
        from conformance.run.context import DEFAULT_TIMEOUT_S
        from conformance.run.runner import select
        from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB, select_cases

        given = {name: OPTIONS[name].from_plugin(config) for name in PLUGIN_OPTIONS}  # checked as the CLI checks
        self.spec = api.load_spec()
        self.selection = api.Selection(
            seed=DEFAULT_SEED if given["seed"] is None else given["seed"], suite=given["suite"] or "default",
            case_files=given["cases"], only=given["only"], reduction=given["reduction"],
            log_target=given["log_target"], dtype=given["dtype"], family=given["family"],
            memory_budget_mb=(DEFAULT_MEMORY_BUDGET_MB if given["memory_budget_mb"] is None
                              else given["memory_budget_mb"]))
        self.apis, self.devices, self.parts = given["api"], given["device"], given["part"]
        self.modes = tuple(dict.fromkeys(given["mode"]))
        self.timeout_s = DEFAULT_TIMEOUT_S if given["timeout_s"] is None else given["timeout_s"]
        self.frameworks = [api.framework_name(name) for name in dict.fromkeys(config.getoption("kl_framework"))]
        self.adapters = {name: get_adapter(name) for name in self.frameworks}
        named: dict[str, str] = {}  # an adapter's name -> the --kl-framework that gave it: its items' node ids
        for name, adapter in self.adapters.items():
            if named.setdefault(adapter.name, name) != name:
                raise UsageError(f"{named[adapter.name]} and {name} are both adapter {adapter.name!r}: their items "
                                 "would have the same names", where="--kl-framework",
                                 fix="give an adapter once; judge two adapters of one name in two sessions")
        for name, adapter in self.adapters.items():  # unknown names are refused before any worker starts
            select(name, [a.name for a in adapter.apis], adapter.known_devices, adapter.known_devices,
                   self.apis, self.devices, self.modes, adapter.mode_names())
        for name in self.frameworks:  # each worker imports its framework while the options are checked below
            pool = self.pool_of(name)
            if not pool.launched:
                pool.launch()
        self.known = load_known(given["known"]) if given["known"] else None
        self.baseline = given["baseline"]
        self.like, self.like_run = given["like"], given["like_run"]
        self.fail_on_own = config.getoption("kl_fail_on_own")
        self.baseline_rows = self._baseline_rows() if self.baseline else {}
        # the cases collection makes items of (validating files, ids and values), drawn while the framework's
        # worker still imports it
        self.chosen = list(select_cases(self.spec, self.selection))
        if not self.chosen:
            raise UsageError("no case matches the selection", where="--kl-only / --kl-cases / --kl-suite / "
                             "--kl-reduction / --kl-log-target / --kl-dtype / --kl-family",
                             fix="check the ids with `kl-conformance cases`")
        self.marks = self._like_marks()
        self.selected: set[str] = set()  # the suite's items this session runs (after -k, --deselect, --lf)
        self.finished: set[str] = set()  # those that ran to their end (a stop at -x or --maxfail leaves some out)
        self.rows: dict = {}  # (framework, case id) -> {(api, device, mode, part): Result}
        self.shares: dict = {}  # (framework, case id) -> the cases judged with it, in one run
        self.runs = 0
        self.written: dict[Path, list] = {}  # each run directory this process wrote -> its rows
        handed = getattr(config, "workerinput", {}).get(_WORKER_INPUT)
        if handed is not None:  # an xdist worker: the controller found the devices and made the shared directory
            self.dir, self.present = Path(handed["dir"]), {k: tuple(v) for k, v in handed["present"].items()}
            self.unusable = {k: dict(v) for k, v in handed["unusable"].items()}
            return
        if self.baseline:  # before any item runs, once: the baseline must hold these cases' values
            from conformance.arguments import check_baseline_cases

            check_baseline_cases(Path(self.baseline), self.spec, self.selection)
        self.controller = True
        from conformance.core.scratch import make_scratch

        self.dir = make_scratch("kl-conformance-pytest-")  # one a killed session left goes with the next
        if config.getoption("dist", "no") == "no":  # this process judges the items: their first expectations
            from conformance.pytest_runs import judges_while_loading

            self.cache, self.judges = judges_while_loading(self)
        self.present = {}
        self.unusable: dict[str, dict[str, str]] = {}  # framework -> {mode: why it cannot run here}
        for name, adapter in self.adapters.items():
            pool = self.pool_of(name)
            try:
                info = pool.wait_ready()
            except Exception as exc:  # WorkerUnavailable: the framework cannot be loaded
                self._discard()
                pytest.exit(f"kl-conformance: {name} did not run: {exc}", returncode=3)
            self.present[name] = tuple(info.devices)
            self.unusable[name] = {m: str(why) for m, why in info.unusable_modes.items() if m in self.modes}
            select(name, [a.name for a in adapter.apis], adapter.known_devices, info.devices, self.apis,
                   self.devices)

    def _discard(self) -> None:
        """Stop the workers and, in the controller, remove the shared directory: the suite did not set up."""
        import shutil

        self.close()
        if self.controller and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _baseline_rows(self) -> dict:
        from conformance.report.baseline import baseline_rows

        # a run's directory or its --write-baseline file, of this spec and seed (the same cases under its ids)
        return baseline_rows(self.baseline, self.spec.hash, self.selection.seed, where="--kl-baseline")

    def _like_marks(self):
        """--kl-like and --kl-like-run, checked as `run` checks them: the marks of the port's rows, or None."""
        import argparse
        import tempfile

        from conformance.arguments import like_marks

        args = argparse.Namespace(like=self.like, like_run=self.like_run, profiles=None,
                                  fail_on_own=self.fail_on_own, out=tempfile.gettempdir())  # the plugin writes no run
        return like_marks(self.spec, args, mirrors={a.name: a.mirrored() for a in self.adapters.values()})

    def pool_of(self, name: str):
        """The framework's worker pool: the one launched as the plugin was configured, or a new one."""
        if name not in self.pools:
            self.pools[name] = new_pool(name)
        self.pools[name].timeout_s = self.timeout_s
        return self.pools[name]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        self.judges.clear()
        if self.cache is not None:
            self.cache.close()

    # xdist: the controller hands each worker the devices and the shared directory
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        present = {name: list(devices) for name, devices in self.present.items()}
        node.workerinput[_WORKER_INPUT] = {"dir": str(self.dir), "present": present, "unusable": self.unusable}
        self.close()  # the controller runs no item: its workers judge them

    @pytest.hookimpl(tryfirst=True)  # before -k and -m choose among the items
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        from conformance.core.model import EAGER
        from conformance.reference.forward import takes_input_space

        for name in self.frameworks:
            adapter = self.adapters[name]
            label = f"{SUITE_PREFIX}{adapter.name}]"
            collector = FrameworkItems.from_parent(session, name=label, nodeid=label)
            devices = [d for d in (self.devices or self.present[name]) if d in self.present[name]]
            apis = [a for a in adapter.apis if not self.apis or a.name in self.apis]
            made = []
            for case in self.chosen:
                for api in apis:
                    if not takes_input_space(case, api.dialect, self.spec):
                        continue  # no row: the API's dialect does not speak the case's input space
                    for mode, device in itertools.product(self.modes or (EAGER,), devices):
                        for part in case.parts:
                            if not self.parts or part in self.parts:
                                call = (api.name, device, mode, part)
                                # the node id given whole, so that pytest parses it as it parses the ids its
                                # cache keeps (--lf, --ff): the case's name, then its call as the parameters
                                made.append(Call.from_parent(
                                    collector, name=item_name(case.id, call), nodeid=node_id(adapter.name, case.id,
                                                                                             call),
                                    framework=name, case=case, call=call))
            # as a collector's report, so that the terminal counts them as collected
            config.hook.pytest_collectreport(report=pytest.CollectReport(label, "passed", None, made))
            items.extend(made)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item):
        return True if lean_protocol(item) else None

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "teardown" and report.nodeid in self.selected:
            self.finished.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        """Under xdist the controller collects nothing: each worker says which items it collected (after -k)."""
        self.selected.update(nodeid for nodeid in ids if nodeid.startswith(SUITE_PREFIX))

    def pytest_deselected(self, items) -> None:
        if any(isinstance(item, Call) for item in items):
            (self.dir / _DESELECTED).touch()

    def pytest_collection_finish(self, session) -> None:
        """Deal the collected cases into this process's shares (`deal_shares`), as the xdist scheduler deals them."""
        calls = [item for item in session.items if isinstance(item, Call)]
        self.selected = {item.nodeid for item in calls}
        workers = getattr(self.config, "workerinput", {}).get("workercount")
        shares = deal_shares([item.nodeid for item in calls], workers * SHARES_PER_WORKER if workers else 1)
        grouped: dict[str, dict] = {}
        for item in calls:
            grouped.setdefault(shares[item.nodeid], {})[(item.framework, item.case.id)] = item.case
        self.shares = {key: list(cases.values()) for cases in grouped.values() for key in cases}

    def rows_of(self, framework: str, case) -> dict:
        """The case's rows on every selected API, device and part: its whole share is judged in one run, the
        first time one of the share's items asks."""
        key = (framework, case.id)
        if key not in self.rows:
            share = self.shares.get(key, [case])
            judged = self._judge(framework, share)
            for each in share:
                self.rows[(framework, each.id)] = judged.get(each.id, {})
        return self.rows[key]

    def _judge(self, framework: str, cases: list) -> dict:
        """{case id: {(api, device, mode, part): Result}} of one run of the runner over `cases`."""
        from conformance.pytest_runs import judge_share

        self.runs += 1
        out = self.dir / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{self.runs:06d}"
        self.written[out] = judge_share(self, framework, cases, out)  # the gate's rows, when this process gates
        judged: dict = {}
        for r in self.written[out]:
            judged.setdefault(r.case_id, {})[(r.api, r.device, r.mode, r.part)] = r
        return judged

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config, log):
        """Under xdist, each share's items on one worker (`--dist each` runs every item everywhere, as asked)."""
        if config.getvalue("dist") == "each":
            return None
        return share_scheduling()(config, log)

    def pytest_sessionfinish(self, session) -> None:
        self.close()
        try:
            if self.controller:
                self._decide(session)
        finally:  # judged and gated: the collections pytest and Python make at their end need not walk the rows
            self.rows, self.written, self.baseline_rows, self.shares = {}, {}, {}, {}

    def _decide(self, session) -> None:
        """The gates' decision, printed as `run` prints it, and the session's exit status from it."""
        # collecting only (as an editor's test discovery does) judges nothing: there is nothing to gate
        gated = (self.known is not None or self.baseline is not None or self.fail_on_own) \
            and not self.config.getoption("collectonly")
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if gated and not self.selected and (self.dir / _DESELECTED).exists():
            # -k, -m or --deselect left out every item of the suite (a project's own tests run alone, the gates in
            # its addopts): the gates judge nothing, and the session's status is its own tests'
            if reporter is not None:
                reporter.line("")
                reporter.write_line("kl-conformance: no item of the conformance suite selected (-k, -m, --deselect, "
                                    "--lf): the gates judged nothing")
            return
        if gated:
            from conformance.report.gate import EXIT_INCOMPLETE

            decision = self._gate()
            if reporter is not None:  # what `run` prints of its decision
                reporter.line("")  # the progress line is still open: pytest ends it after this hook
                for kind, line in decision.shown():
                    red = kind in ("failed", "detail") or (kind == "decision" and bool(decision.code))
                    reporter.write_line(line, red=red, bold=kind in ("failed", "decision"))
            if decision.code == EXIT_INCOMPLETE and session.exitstatus in (pytest.ExitCode.OK,
                                                                            pytest.ExitCode.TESTS_FAILED):
                session.exitstatus = EXIT_INCOMPLETE  # not everything was judged, as `run` exits: not a regression
            elif decision.lines and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _gate(self):
        """The CLI's gates over every row this session wrote (each case's run directory)."""
        from collections import Counter

        from conformance import api
        from conformance.core.manifest import read_manifest
        from conformance.core.results import RESULTS_FILE, iter_results

        # some items left out (-k, --lf) or not run (a stop at -x or --maxfail): the known entries about them are
        # not exercised; -x alone, in a session that ran every item, narrows nothing
        deselected = (self.dir / _DESELECTED).exists()
        partial = deselected or bool(self.selected - self.finished)
        outcomes, seen = [], set()
        for run in sorted(p for p in self.dir.iterdir() if (p / RESULTS_FILE).is_file()):
            manifest = read_manifest(run)
            if partial:
                selection = manifest.setdefault("selection", {})
                selection["narrowed_by"] = sorted(set(selection.get("narrowed_by", [])) | {"--only"})
            # under xdist, a case whose items two workers ran was judged by each: its rows count once, and so
            # does what run.json counts of them (the gate refuses a run whose counts disagree with its rows)
            written = self.written[run] if run in self.written else list(iter_results(run))
            # a case is judged on every part and API, its items left out by -k or --deselect too: their rows
            # are not this session's (a baseline's rows of them are not checked, as a narrower `run`'s)
            rows = [r for r in written if r.key not in seen
                    and (not deselected or node_id(r.framework, r.case_id, r.call[1:]) in self.selected)]
            seen.update(r.key for r in rows)
            if written and not rows:
                continue  # another worker's run of the same case holds every row, or no item of it was selected
            if len(rows) < len(written) and isinstance(manifest.get("counts"), dict):
                manifest["counts"] = dict(Counter(r.verdict.value for r in rows))
                manifest["cases"] = len({r.case_id for r in rows})
            outcomes.append(api.RunOutcome(rows, manifest, like_run=Path(self.like_run) if self.like_run else None))
        return api.gate(outcomes, known=self.known, baseline=self.baseline, fail_on_new=self.baseline is not None,
                        like=self.like, like_run=self.like_run, fail_on_own=self.fail_on_own,
                        spec=self.spec)

    def pytest_unconfigure(self, config) -> None:
        self.close()
        if self.controller:
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)
