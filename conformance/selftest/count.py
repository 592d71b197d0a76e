"""Counts what a variant's run flagged: its planted rows (flagged? attributed to the rule the fault breaks?) and
its other rows, each of which must be the control's.

The rows planted into are read from the variant's log (fault.record); a hang costs every call of its case that
was sent. A planted row counts as flagged where it is neither `pass` nor `documented`, and as attributed where
its cause is the rule the fault breaks (or `unexplained`, or the formula, for a fault that breaks no rule of its
own), or where the convention the judge names reproduces the recorded answer under the comparison rule.

Reads the rows and details the runs wrote; never calls a framework, and checks what the judge claims only under
the comparison rule restated in fault.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from conformance.adapters.base import in_mode
from conformance.core.case import Case
from conformance.core.choices import alternatives, with_alternatives
from conformance.core.details import iter_details
from conformance.core.model import CLAIM, EAGER, UNEXPLAINED, Observation, Spec
from conformance.core.results import iter_results
from conformance.judge.profiles import DeviationLedger, apply_deviations
from conformance.reference.grad import expected_for
from conformance.report.selftest import VariantReport
from conformance.run.task import FRAMEWORK_TIMEOUT
from conformance.selftest.fault import Variant, accepted


def count_variant(variant: type[Variant], log: Path, run_dir: Path, adapter, cases: Sequence[Case],
                  spec: Spec, modes: Sequence[str], control_rows: dict, ledger: DeviationLedger) -> VariantReport:
    """The variant's report: its planted rows (flagged? attributed?), and its other rows against the control's
    (`control_rows`, by `Result.call`) of the cases the variant ran; `ledger` says which calls the profile keeps
    from being sent."""
    report = VariantReport(variant.name, variant.fault)
    # each planted call (case id, api, mode, part), and the cause it must be given
    planted: dict[tuple[str, str, str, str], str | None] = {}
    clean: set[tuple[str, str, str, str]] = set()  # the calls planted into an answer that met the spec
    whole: set[str] = set()
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["whole_case"]:
                whole.add(row["case_id"])
            else:
                call = (row["case_id"], row["api"], row["mode"], row["part"])
                planted[call] = row["rule"]
                if row["clean"]:
                    clean.add(call)
    by_id = {c.id: c for c in cases}
    implementations = adapter.implementations()
    for case_id in whole:  # a hang costs every call of the case that was sent to the framework
        case = by_id[case_id]
        calls = set()
        for mode in modes:
            calls |= {(case_id, api.name, mode, part) for api in adapter.apis for part in case.parts
                      if adapter.unsupported_reason(case, api) is None
                      and in_mode(adapter.unsupported_part, mode, api, part) is None
                      and ledger.unsupported(case, api.name, part, mode) is None}
        planted.update(dict.fromkeys(calls, FRAMEWORK_TIMEOUT))
        clean |= calls
    got = {(d["case_id"], d["api"], d["device"], d["mode"], d["part"]): d for d in iter_details(run_dir)}
    seen = set()
    for row in iter_results(run_dir):
        key = (row.case_id, row.api, row.mode, row.part)
        seen.add(row.call)
        if key not in planted:
            _compare_unplanted(report, row, control_rows.get(row.call))
            continue
        report.planted += 1
        report.verdicts[row.verdict.value] = report.verdicts.get(row.verdict.value, 0) + 1
        if not (row.verdict.is_divergence and not row.documented):
            if len(report.missed) < 10:
                report.missed.append(f"{row.case_id} {row.api} {row.device} {_mode_word(row.mode)}{row.part}: "
                                     f"{row.verdict.value}"
                                     f"{' (documented)' if row.documented else ''} {row.message}")
            continue
        report.flagged += 1
        if key not in clean:  # planted over the framework's own divergence: two faults, either may be the cause
            report.over_divergence += 1
            continue
        rule = planted[key]
        detail = got.get(row.call)
        if row.cause == (rule or UNEXPLAINED) or (rule is None and row.cause in FORMULAS) \
                or _reproduced_by_claim(row, detail, by_id[row.case_id], adapter, spec, ledger):
            report.attributed += 1
            if rule is not None:  # an unexplained row's defect is what it shows, which the fault varies by call
                implementation = implementations.get(row.api, row.api)
                report.defects.setdefault(f"{row.cause} on {implementation}", set()).add(row.defect)
        elif len(report.misattributed) < 10:
            report.misattributed.append(f"{row.case_id} {row.api} {row.device} {_mode_word(row.mode)}{row.part}: "
                                        f"cause {row.cause!r}, "
                                        f"not {rule or UNEXPLAINED!r}; {row.message}")
    for call, control in control_rows.items():  # a call the control judged lost its row: the fault cost more
        if call[0] in by_id and call not in seen:
            report.disturbed += 1
            if len(report.disturbances) < 10:
                report.disturbances.append(f"{' '.join(call[:3])} {_mode_word(call[3])}{call[4]}: no row; the "
                                           f"control: {control.verdict.value}")
    return report


def _compare_unplanted(report: VariantReport, row, control) -> None:
    """A row the variant did not plant into must be the control's: the fault costs only the calls it hit."""
    if control is not None and (row.verdict, row.cause, row.documented) == \
            (control.verdict, control.cause, control.documented):
        return
    report.disturbed += 1
    if len(report.disturbances) < 10:
        was = "no row" if control is None else f"{control.verdict.value} ({control.cause or 'no cause'})"
        report.disturbances.append(f"{row.case_id} {row.api} {row.device} {_mode_word(row.mode)}{row.part}: "
                                   f"{row.verdict.value} ({row.cause or 'no cause'}); the control: {was}")


def _mode_word(mode: str) -> str:
    """A row's mode as a missed row's line names it: nothing for eager."""
    return "" if mode == EAGER else f"{mode} "


FORMULAS = ("pointwise.formula", "gradients.formula")  # what a fault that breaks no rule of its own may be called
BESIDE = " beside the profile ("  # and the profile entries a residual cause is named beside (judge/casejudge.py)


def _reproduced_by_claim(row, detail: dict | None, case: Case, adapter, spec: Spec, ledger: DeviationLedger) -> bool:
    """Whether the spec choices the row's message says it behaves as do reproduce the planted answer, checked
    here under the comparison rule restated in fault.py: a planted fault that happens to be exactly another listed
    convention is rightly called that convention. A claim made beside the profile ("... beside the profile (ids)",
    the judge's residual cause) is checked with those entries of the API's profile applied. A claim that cannot be
    checked (the answer's values are not all recorded, an entry the API does not declare) does not count."""
    if CLAIM not in row.message or detail is None:
        return False
    said, base = row.message.rsplit(CLAIM, 1)[1], spec
    if said.endswith(")") and BESIDE in said:
        said, ids = said[:-1].split(BESIDE, 1)
        declared = {d.id: d for d in ledger.declared(row.api, row.mode, row.device, case, row.part)}
        if not ids or any(i not in declared for i in ids.split(", ")):
            return False
        base = apply_deviations(spec, [declared[i] for i in ids.split(", ")])
    offered = {str(alt): alt for alt in alternatives(base)}
    claimed = said.split(", ")
    if not claimed or any(c not in offered for c in claimed):
        return False
    if " + ".join(offered[c].path for c in claimed) != row.cause:
        return False
    observed = _recorded_observation(row, detail)
    if observed is None:
        return False
    expected = expected_for(case, with_alternatives(base, tuple(offered[c] for c in claimed)), row.part,
                            adapter.api(row.api).dialect)
    return bool(accepted(observed, expected))


def _recorded_observation(row, detail: dict) -> Observation | None:
    """The answer a details.jsonl line records in full, or None where its values were cut short."""
    raised = detail.get("raised")
    if raised:
        return Observation(exception_type=raised.split(":", 1)[0], exception_message=raised.split(": ", 1)[-1])
    values = detail.get("got")
    if not values or values.get("truncated"):
        return None
    array = np.array([float(v) for v in values["values"]], dtype=np.float64).reshape(values["shape"])
    return Observation(value=array, dtype=row.dtype, shape=tuple(values["shape"]))
