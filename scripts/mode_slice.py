"""The mode slice (`--suite mode-slice`, what `tox -m conformance` runs each mode on), kept honest by recorded runs.

    python scripts/mode_slice.py record RUN_DIR... [--out tests/data/mode-findings.json]
    python scripts/mode_slice.py choose [--findings tests/data/mode-findings.json] [--out cases/mode_slice.txt]

`record` reads the mode runs of a whole matrix over the whole mode suite (`tox -m conformance-full`: each
reports/<env>-modes) and writes, for each framework release and mode, each finding (defect) its rows showed and
the signatures it showed on. `choose` picks the fewest signatures of the mode suite it can (greedily, then dropping
any the others make redundant) such that every recorded finding shows on one of them, and every floating dtype
and every (reduction, log_target) the spec names is in one, and writes them with what each was chosen for.
Input it cannot use is refused in one line, exit 2, before anything is written.
tests/cases/test_mode_slice.py checks the slice against the recording, and the recording against the mode suite.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from conformance.cases.generate import generated_keys
from conformance.cases.ids import signature
from conformance.cases.suites import MODE_SLICE
from conformance.core.atomicfile import write_atomic
from conformance.core.model import EAGER, FLOAT_DTYPES
from conformance.core.specload import load_spec

FINDINGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "mode-findings.json"
HEADER = """\
# The mode slice: the mode suite's signatures that `kl-conformance run --suite mode-slice` runs, every case of each.
# Written by `python scripts/mode_slice.py choose` from tests/data/mode-findings.json (a recorded run of every
# framework's modes over the whole mode suite); do not edit it by hand, record and choose again.
# After each signature: what no other signature of the slice shows, the frameworks and modes whose findings (and
# the floating dtypes and (reduction, log_target)) it alone stands for.
"""


class Refused(Exception):
    """Input the script cannot use: its message names what and the fix."""


def record(run_dirs: list[Path]) -> dict:
    """Each mode's findings in `run_dirs` (runs over the whole mode suite), with the signatures each showed on."""
    shown: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    titles: dict[str, str] = {}
    provenance = set()
    for run_dir in run_dirs:
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        if run.get("suite") != "modes" or run.get("status") != "complete":
            raise Refused(f"{run_dir}: a complete run of --suite modes is needed, not suite {run.get('suite')!r} "
                          f"with status {run.get('status')!r}; run `tox -m conformance-full` and record its runs")
        selection = run.get("selection") or {}
        narrowed = [k for k in ("only", "dtype", "family", "reduction", "log_target", "parts", "apis")
                    if run.get(k) or selection.get(k)] + (["shard"] if run.get("shard") else [])
        if narrowed:
            raise Refused(f"{run_dir}: the whole mode suite is needed, not one narrowed by {', '.join(narrowed)}; "
                          "record a run without them")
        provenance.add((run["spec_hash"], run["seed"]))
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        titles.update({d["id"]: d["title"] for d in summary["defects"]})
        with (run_dir / "results.jsonl").open(encoding="utf-8") as rows:
            for line in rows:
                row = json.loads(line)
                if row["defect"] and row["mode"] != EAGER:
                    key = (row["framework"], row["framework_version"], row["mode"], row["defect"])
                    shown[key].add(signature(row["case_id"]))
    if len(provenance) != 1:
        raise Refused(f"the runs are of different specs or seeds: {sorted(provenance)}; record one matrix's runs")
    (spec_hash, seed), = provenance
    findings = [{"framework": f, "release": r, "mode": m, "defect": d, "title": titles.get(d, ""),
                 "signatures": sorted(sigs)} for (f, r, m, d), sigs in sorted(shown.items())]
    return {"about": "each mode's findings over the whole mode suite, and the signatures each showed on: "
                     "written by `python scripts/mode_slice.py record`", "spec_hash": spec_hash, "seed": seed,
            "findings": findings}


def write_findings(recorded: dict, path: Path) -> None:
    """The recording as JSON, each signature written once (`signatures`) and each finding naming its own by
    index (`shown_on`), one finding a line, so that a new recording's diff shows which findings changed."""
    signatures = sorted({s for f in recorded["findings"] for s in f["signatures"]})
    index = {s: i for i, s in enumerate(signatures)}
    head = {k: v for k, v in recorded.items() if k != "findings"}
    rows = [json.dumps({**{k: v for k, v in f.items() if k != "signatures"},
                        "shown_on": [index[s] for s in f["signatures"]]}) for f in recorded["findings"]]
    text = json.dumps({**head, "signatures": signatures}, indent=1)[:-2]
    write_atomic(path, text + ',\n "findings": [\n  ' + ",\n  ".join(rows) + "\n ]\n}\n")


def read_findings(path: Path) -> dict:
    """A recording as `record` returns it: each finding with its signatures by name."""
    data = json.loads(path.read_text(encoding="utf-8"))
    names = data.pop("signatures")
    data["findings"] = [{**{k: v for k, v in f.items() if k != "shown_on"},
                         "signatures": [names[i] for i in f["shown_on"]]} for f in data["findings"]]
    return data


def mode_suite_signatures(spec) -> dict[str, set[str]]:
    """Each signature of the mode suite, in the suite's order, with the anchors it stands for: each floating dtype
    it holds, and its (reduction, log_target) where the spec names the reduction (the unknown ones are error cases,
    shown where a finding needs them)."""
    out: dict[str, set[str]] = {}
    for case_id, key in generated_keys(spec, suite="modes"):
        anchors = out.setdefault(signature(case_id), set())
        anchors.update(f"{d}" for d in (key.dtype.input, key.dtype.target) if d in FLOAT_DTYPES)
        if key.params.reduction in spec.reductions:
            anchors.add(f"{key.params.reduction} log_target={int(key.params.log_target)}")
    return out


def required(findings: dict, spec) -> dict[str, set[str]]:
    """What the slice must show, each with the signatures that show it: every recorded finding, every anchor."""
    needs: dict[str, set[str]] = defaultdict(set)
    for f in findings["findings"]:
        needs[f"{f['framework']} {f['release']} {f['mode']}: {f['defect']}"].update(f["signatures"])
    for sig, anchors in mode_suite_signatures(spec).items():
        for anchor in anchors:
            needs[anchor].add(sig)
    return needs


def choose(findings: dict, spec) -> list[tuple[str, list[str]]]:
    """The fewest signatures the greedy cover finds that show everything `required` names, in the mode suite's order,
    each with what it was chosen for; a signature the others make redundant is dropped."""
    needs = required(findings, spec)
    order = list(mode_suite_signatures(spec))
    shows: dict[str, set[str]] = defaultdict(set)
    for need, sigs in needs.items():
        for sig in sigs:
            shows[sig].add(need)
    left, chosen = set(needs), []
    while left:
        best = max(order, key=lambda s: len(shows[s] & left))  # the first of the suite's order on a tie
        if not shows[best] & left:
            raise Refused(f"no signature of the mode suite shows {sorted(left)[:3]}: the recording is of another mode "
                          "suite; record again")
        chosen.append(best)
        left -= shows[best]
    for sig in reversed(list(chosen)):
        rest = set().union(*(shows[s] for s in chosen if s != sig))
        if set(needs) <= rest:
            chosen.remove(sig)
    return [(sig, sorted(shows[sig])) for sig in order if sig in chosen]


def slice_text(chosen: list[tuple[str, list[str]]]) -> str:
    """The slice file: each signature with what no other signature of the slice shows (why it is there)."""
    lines = [HEADER]
    times = defaultdict(int)
    for _, reasons in chosen:
        for r in reasons:
            times[r] += 1
    for sig, shown_by_all in chosen:
        reasons = [r for r in shown_by_all if times[r] == 1]
        modes: dict[str, set[str]] = defaultdict(set)
        for head in (r.split(": ", 1)[0].split() for r in reasons if ": " in r):
            modes[head[0]].add(head[-1])  # "<framework> <release, which may hold spaces> <mode>"
        shown = [f"{f} {', '.join(sorted(m))}" for f, m in sorted(modes.items())]
        anchors = sorted(r for r in reasons if ": " not in r)
        lines.append(f"{sig}  # " + "; ".join(shown + ([f"stands for {', '.join(anchors)}"] if anchors else [])))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/mode_slice.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="write the findings of mode runs over the whole mode suite")
    rec.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    rec.add_argument("--out", type=Path, default=FINDINGS)
    cho = sub.add_parser("choose", help="write the slice's signatures from the recorded findings")
    cho.add_argument("--findings", type=Path, default=FINDINGS)
    cho.add_argument("--out", type=Path, default=MODE_SLICE)
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            recorded = record(args.run_dirs)
            write_findings(recorded, args.out)
        else:
            text = slice_text(choose(read_findings(args.findings), load_spec()))
            write_atomic(args.out, text)
    except Refused as exc:
        print(f"python scripts/mode_slice.py: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:  # a file missing, or not what it writes
        print(f"python scripts/mode_slice.py: {getattr(exc, 'filename', None) or 'input'}: cannot be read as "
              f"{args.command} needs ({type(exc).__name__}: {exc}); give the run directories of a matrix, or a "
              "recording this script wrote", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
