"""The pytest plugin's items: one per (case, API, device, mode, part) of a framework, whose outcome is its row's
verdict, and the shares that keep a case's items in one process.

The session's suite (conformance/pytest_plugin.py) judges a share of cases in one run when its first item asks;
an item reads its row and passes, skips, xfails (a divergence the profile documents, a known entry or the baseline
accepts) or fails with the row's verdict, cause, values and `kl-conformance repro` command. Imports only pytest at
module level, as the plugin does.
"""

from __future__ import annotations

import pytest

SHARES_PER_WORKER = 2  # under xdist: enough shares for a worker that finishes first to take another
SUITE_PREFIX = "kl-conformance["  # the suite's node ids: "kl-conformance[ADAPTER]::CASE[API-DEVICE-MODE-PART]"


def item_name(case_id: str, call: tuple[str, str, str, str]) -> str:
    """An item's name: the case id, then its call (API, device, the mode where not eager, part) as parameters."""
    from conformance.core.model import EAGER  # imported once the suite is collected, never at the plugin's load

    api, device, mode, part = call
    return f"{case_id}[{'-'.join([api, device, *([] if mode == EAGER else [mode]), part])}]"


def node_id(adapter: str, case_id: str, call: tuple[str, str, str, str]) -> str:
    """The node id of the item of one call of one case (a row's: its framework, case id and call)."""
    return f"{SUITE_PREFIX}{adapter}]::{item_name(case_id, call)}"


def deal_shares(nodeids: list[str], count: int) -> dict[str, str | None]:
    """Each item's share (None for an item that is not the suite's): each framework's cases, in the order they
    were collected, dealt in turn into `count` shares, so that the shares hold a like mix of cases and every
    item of one case is in the same share."""
    dealt: dict[str, dict[str, int]] = {}  # framework's collector -> {case id: its place in the deal}
    shares: dict[str, str | None] = {}
    for nodeid in nodeids:
        label, _, name = nodeid.partition("::")
        if not (label.startswith(SUITE_PREFIX) and name):
            shares[nodeid] = None
            continue
        cases = dealt.setdefault(label, {})
        place = cases.setdefault(name.rpartition("[")[0], len(cases))
        shares[nodeid] = f"{label}::share-{place % count}"
    return shares


def share_scheduling():
    """xdist's scope scheduling with the suite's shares as its scopes, each other item a scope of its own."""
    from xdist.scheduler import LoadScopeScheduling

    class ShareScheduling(LoadScopeScheduling):
        _of: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._of is None:
                self._of = deal_shares(list(self.collection), self.numnodes * SHARES_PER_WORKER)
            return self._of.get(nodeid) or nodeid

    return ShareScheduling


class FrameworkItems(pytest.Collector):
    """The items of one framework (their parent, so that each item's node id names it)."""

    def collect(self):
        return []


# options under which pytest's own protocol does what the lean one does not: shows or stops at setup, reruns
# an xfail, enters the debugger on a failure
_FULL_PROTOCOL_OPTIONS = ("setuponly", "setupplan", "setupshow", "runxfail", "usepdb", "trace")


def lean_protocol(item) -> bool:
    """Run a suite's item as pytest's protocol would, without its per-phase hooks: the item has no fixtures to set
    up or tear down and prints nothing to capture (its row was judged in its share's run), and pytest's setup,
    call and teardown hooks cost several times what the item's own work does. The same reports go to the same
    hooks (makereport, so that xfail and other plugins' wrappers see them; logreport, so that the terminal,
    junit.xml, -x and xdist count them). False, doing nothing, where pytest's full protocol must run: an item a
    user marked, or an option above."""
    config = item.config
    if not isinstance(item, Call) or next(item.iter_markers(), None) is not None \
            or any(config.getoption(name, False) for name in _FULL_PROTOCOL_OPTIONS):
        return False
    ihook, keywords = item.ihook, {name: 1 for name in item.keywords}
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for when, phase in (("setup", None), ("call", item.runtest), ("teardown", None)):
        if phase is None:  # nothing to set up or tear down: the report pytest's own makereport makes of that
            report = pytest.TestReport(item.nodeid, item.location, keywords, "passed", None, when, [], 0.0)
        else:
            call = pytest.CallInfo.from_call(phase, when=when, reraise=(pytest.exit.Exception, KeyboardInterrupt))
            report = ihook.pytest_runtest_makereport(item=item, call=call)
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


class Divergence(Exception):
    """An undocumented divergence: its text is the item's failure."""


class Call(pytest.Item):
    """One (case, API, device, mode, part) of one framework."""

    def __init__(self, *, framework: str, case, call: tuple[str, str, str, str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.framework, self.case, self.call = framework, case, call

    def runtest(self) -> None:
        suite = self.config.pluginmanager.get_plugin("kl-conformance-suite")
        why = suite.unusable.get(self.framework, {}).get(self.call[2])
        if why:
            pytest.skip(f"mode {self.call[2]} cannot run here: {why}")
        row = suite.rows_of(self.framework, self.case).get(self.call)
        if row is None:
            pytest.fail(f"kl-conformance: no result for {self.case.id} on {' / '.join(self.call)}", pytrace=False)
        if row.verdict.outcome == "passed":
            return
        if row.verdict.outcome == "skipped":
            pytest.skip(row.message if row.refused else f"{row.verdict.value}: {row.message}")
        reason = accepted(row, suite)
        if reason:
            pytest.xfail(reason)
        raise Divergence(failure_text(row, self.framework, self.case, suite))

    def repr_failure(self, excinfo, style=None):
        # an xfail's reason is all it shows: pytest would format (and parse the source of) its traceback first
        if isinstance(excinfo.value, (Divergence, pytest.xfail.Exception)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        # a line, though the item has no source line: pytest places a skip mark's report at its item's line
        return self.path, 0, f"{self.framework}: {self.name}"


def accepted(row, suite) -> str:
    """Why a divergence does not fail: the profile documents it, a known entry accepts it, or every gate the
    session asked for accepts it, as `run`'s gates do: shared with the recorded run (--kl-fail-on-own), unchanged
    since the baseline (--kl-baseline), both where both are asked. Empty where none of these holds."""
    said = f"{row.verdict.value} ({row.cause})" if row.cause else row.verdict.value
    if row.documented:
        return f"{said}: documented by the {row.framework} profile: {', '.join(row.documented_by)}"
    if row.known_by:
        return f"{said}: known ({suite.config.getoption('kl_known')}: {', '.join(row.known_by)})"
    reasons = []
    if suite.fail_on_own:  # the port's own divergence fails, whatever the baseline says
        if row.like != "shared":
            return ""
        reasons.append(f"shared with {suite.like}'s recorded run {suite.like_run} (--kl-fail-on-own)")
    if suite.baseline is not None:  # a new or changed divergence fails, shared or not
        before = suite.baseline_rows.get(row.key)
        if before is None or (before.verdict, before.cause) != (row.verdict, row.cause):
            return ""
        reasons.append(f"unchanged since the baseline {suite.baseline}")
    return f"{said}: {'; '.join(reasons)}" if reasons else ""


def failure_text(row, framework: str, case, suite) -> str:
    from conformance.cases.generate import DEFAULT_SEED
    from conformance.core.text import terminal_line
    from conformance.report.releases import call_text
    from conformance.report.reprocommand import repro_command

    seed = suite.selection.seed
    command = repro_command(row, {**({} if seed == DEFAULT_SEED else {"seed": seed}),
                                  **({"like": suite.like} if suite.like else {})}, framework)
    lines = [f"{row.framework} {row.framework_version} / {call_text(row.call)}: "
             f"{row.verdict.value}, undocumented",
             f"case:    {terminal_line(case.id)}",
             f"verdict: {row.verdict.value}",
             f"cause:   {terminal_line(row.cause or 'unexplained')}",
             f"got against expected: {terminal_line(row.message)}"]
    if row.max_abs_err is not None and row.bound is not None:
        lines.append(f"worst |error| {row.max_abs_err:.3g} against the bound {row.bound:.3g}")
    if row.like:
        lines.append(f"like:    {row.like}" + (" (not in " if row.like == "own" else " (as in ")
                     + f"{suite.like}'s recorded run {terminal_line(str(suite.like_run))})")
    lines.append("reproduce: " + command)
    return "\n".join(lines)
