"""The self-test's page: one row per planted variant, and what a failing variant missed.

Reads the counts the self-test made; runs nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class VariantReport:
    name: str
    fault: str
    planted: int = 0  # rows planted; for a gate variant, the gates asked
    flagged: int = 0  # of those, rows flagged; for a gate variant, gates that failed as they must
    verdicts: dict[str, int] = field(default_factory=dict)
    missed: list[str] = field(default_factory=list)  # rows planted but not flagged (first few)
    not_applicable: str | None = None  # why the framework can carry no such fault (the variant did not run)
    attributed: int = 0  # flagged rows whose cause is the rule the fault breaks (or unexplained, for none)
    over_divergence: int = 0  # flagged rows planted over the framework's own divergence: their cause is not checked
    misattributed: list[str] = field(default_factory=list)  # flagged rows with another cause (first few)
    # rows the variant did not plant into that differ from the control's (another verdict or cause, or no row)
    disturbed: int = 0
    disturbances: list[str] = field(default_factory=list)  # (first few)
    # the defects the attributed rows form, by the cause they were due and the implementation ("<cause> on <api>"):
    # one fault is one defect per rule it breaks, over every API of one implementation, every part, dtype and mode
    # (core/defects.py)
    defects: dict[str, set[str]] = field(default_factory=dict)

    @property
    def split(self) -> dict[str, list[str]]:
        """The causes whose attributed rows came out as more than one defect."""
        return {cause: sorted(ids) for cause, ids in self.defects.items() if len(ids) > 1}

    @property
    def attribution_checked(self) -> bool:
        """Causes are checked for planted values, not for the gate variants (they plant no value)."""
        return not self.name.startswith("gate_")

    @property
    def ok(self) -> bool:
        return ((self.planted > 0 or self.not_applicable is not None) and self.flagged == self.planted
                and (not self.attribution_checked or self.attributed == self.attribution_due)
                and not self.disturbed and not self.split)

    @property
    def attribution_due(self) -> int:
        """The flagged rows whose cause is checked: those planted into an answer that met the spec."""
        return self.flagged - self.over_divergence


def render_selftest(framework: str, control: dict, reports: list[VariantReport]) -> str:
    """The self-test's Markdown summary: one row per variant."""
    lines = [f"# kl-conformance self-test on {framework}", "",
             f"Control (the real adapter): {sum(control.values())} results, "
             + ", ".join(f"{n} {v}" for v, n in sorted(control.items())) + ".", "",
             "Flagged: the planted rows that are neither `pass` nor documented. Attributed: of those, the rows "
             "whose cause is the spec rule the fault breaks, or `unexplained` where the fault breaks no rule "
             "of its own (a choice the judge names there must reproduce the planted values); a row planted over "
             "the framework's own divergence has two faults, so its cause is not checked (counted apart).", "",
             "| variant | planted fault | rows planted | flagged | attributed | verdicts |",
             "|---|---|---|---|---|---|"]
    for r in reports:
        if r.name.startswith("gate_"):  # a broken build: each gate asked, and the exit code it gave
            mark = "" if r.ok else " **FAIL**"
            lines.append(f"| `{r.name}` | {r.fault} | {r.planted} gates | {r.flagged}/{r.planted} failed as they "
                         f"must{mark} | - | " + ", ".join(sorted(r.verdicts)) + " |" if r.planted else
                         f"| `{r.name}` | {r.fault} | 0 | not applicable: {r.not_applicable} | | |")
            continue
        share = (f"{r.flagged}/{r.planted} ({100 * r.flagged / r.planted:.0f}%)" if r.planted
                 else f"not applicable: {r.not_applicable}" if r.not_applicable else "0/0")
        due = r.attribution_due
        attributed = (f"{r.attributed}/{due} ({100 * r.attributed / due:.0f}%)" if due else "-") + \
            (f"; {r.over_divergence} over a divergence" if r.over_divergence else "")
        mark = "" if r.ok else " **FAIL**"
        lines.append(f"| `{r.name}` | {r.fault} | {r.planted} | {share} | {attributed}{mark} | "
                     + ", ".join(f"{n} {v}" for v, n in sorted(r.verdicts.items())) + " |")
    failed = [r for r in reports if not r.ok]
    lines += ["", "All planted rows were flagged, and attributed to the rule their fault breaks." if not failed else
              f"{len(failed)} variants failed: a variant must plant at least one fault (unless the framework "
              "can carry no such fault), every planted row must be flagged and attributed to the rule its fault "
              "breaks (one defect per rule), every other row must keep the control's verdict and cause, and every "
              "gate asked of a broken build must fail."]
    for r in failed:
        if r.flagged < r.planted or not r.planted:
            lines += ["", f"## `{r.name}`: " + ("planted nothing" if not r.planted else
                                               f"{r.planted - r.flagged} gates passed a broken build"
                                               if r.name.startswith("gate_") else
                                               f"{r.planted - r.flagged} planted rows not flagged")]
            lines += [f"- {m}" for m in r.missed]
        if r.attribution_checked and r.attributed < r.attribution_due:
            lines += ["", f"## `{r.name}`: {r.attribution_due - r.attributed} flagged rows attributed to another cause"]
            lines += [f"- {m}" for m in r.misattributed]
        if r.disturbed:
            lines += ["", f"## `{r.name}`: {r.disturbed} rows it did not plant into differ from the control's"]
            lines += [f"- {m}" for m in r.disturbances]
        if r.split:
            lines += ["", f"## `{r.name}`: one fault came out as several defects"]
            lines += [f"- cause {cause}: defects {', '.join(ids)}" for cause, ids in r.split.items()]
    return "\n".join(lines) + "\n"


def selftest_json(framework: str, control: dict, reports: list[VariantReport]) -> str:
    """selftest.json: the control's verdict counts and each variant's counts."""
    return json.dumps({"framework": framework, "control": control, "variants": [
        {"name": r.name, "fault": r.fault, "planted": r.planted, "flagged": r.flagged, "verdicts": r.verdicts,
         "ok": r.ok, "missed": r.missed, "not_applicable": r.not_applicable, "disturbed": r.disturbed,
         "disturbances": r.disturbances, "defects": {cause: sorted(ids) for cause, ids in sorted(r.defects.items())},
         **({"attributed": r.attributed, "attribution_due": r.attribution_due, "over_divergence": r.over_divergence,
             "misattributed": r.misattributed} if r.attribution_checked else {})}
        for r in reports]}, indent=2) + "\n"
