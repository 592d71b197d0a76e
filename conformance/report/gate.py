"""The exit code of `run` and `report`: which outcomes fail a CI job, and the line that says why.

- 0: finished. Divergences are findings, not failures, unless a gate below asks.
- 1: a gate failed: with --strict, a divergence that no profile documents and no known-findings
  entry accepts; with --fail-on-new, such a divergence that is new or changed since the baseline;
  and, always, a stale entry of the known-findings file (it accepts nothing any more).
- 2: bad input; nothing was written (conformance/core/errors.py; not decided here).
- 3: with --strict, not everything was judged: the framework could not be loaded (not_run), a run
  stopped before its end, or there are no results at all. Without --strict these print a line
  and exit 0, so a matrix with one missing framework still writes its merged report.
- 130: interrupted (Ctrl-C); the rows written so far are kept, and --resume continues.

Reads counts and run manifests only; never a framework or the reference.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from conformance.core.rundirs import iter_rows

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


def exit_code(run_dirs: Sequence[Path], *, strict: bool, fail_on_new: bool, baseline_diff: Any = None,
              known: Any = None, incomplete: Sequence[str] = ()) -> int:
    """Decide the exit code from the rows in `run_dirs`, printing one line per reason on stderr.

    `baseline_diff` is a report.baseline.BaselineDiff, `known` a known.KnownFindings that has
    observed these rows, `incomplete` one line per run that did not judge everything.
    """
    code = EXIT_OK
    for audit in (known.stale() if known is not None else ()):
        print(f"kl-conformance: {known.stale_message(audit)}", file=sys.stderr)
        code = EXIT_GATE
    if strict:
        unaccepted = sum(1 for r in iter_rows(run_dirs) if r.verdict.is_divergence and not r.is_accepted)
        if unaccepted:
            print(f"kl-conformance: --strict: {unaccepted} divergences neither documented nor known",
                  file=sys.stderr)
            code = EXIT_GATE
    if fail_on_new and baseline_diff is not None and baseline_diff.failing:
        print(f"kl-conformance: --fail-on-new: {len(baseline_diff.failing)} divergences new or changed since the "
              f"baseline {baseline_diff.baseline} (listed in baseline.json under 'failing')", file=sys.stderr)
        code = EXIT_GATE
    if strict and incomplete:
        for line in incomplete:
            print(f"kl-conformance: --strict: {line}", file=sys.stderr)
        if code == EXIT_OK:
            code = EXIT_INCOMPLETE
    return code
