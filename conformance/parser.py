"""The command line's grammar: `kl-conformance`'s subcommands and their arguments, the run options among them
taken from their one table (conformance/options.py).

Parses nothing itself and runs nothing: conformance/cli.py parses with it and runs the command.
"""

from __future__ import annotations

import argparse

from conformance.cases.generate import DEFAULT_SEED
from conformance.core.errors import UsageError
from conformance.options import OPTIONS
from conformance.run.context import DEFAULT_TIMEOUT_S
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB
from conformance.version import VersionAction


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 too; keep our one-line shape (no usage block)
        raise UsageError(message, where="command line", fix=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kl-conformance", description="Spec-driven conformance harness for kl_div.")
    parser.add_argument("--version", action=VersionAction,
                        help="print the harness's version (the one run.json records as harness_version), and the "
                             "commit where it runs from a git checkout, and exit")
    # before the command or after it (`kl-conformance run --spec F`): a command's copy sets them only when given
    common = argparse.ArgumentParser(add_help=False)
    for each, default in ((parser, None), (common, argparse.SUPPRESS)):
        each.add_argument("--debug", action="store_true", default=default or False,
                          help="show tracebacks for bad input")
        each.add_argument("--spec", default=default, help="spec file (default: the spec shipped with the harness)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add_case_options(p: argparse.ArgumentParser) -> None:
        OPTIONS["seed"].add_to(p, default=DEFAULT_SEED, metavar=None,
                               help=f"draw of the generated values (default {DEFAULT_SEED})")
        OPTIONS["suite"].add_to(p, default="default")
        p.add_argument("--exhaustive", dest="suite", action="store_const", const="exhaustive",
                       help="same as --suite exhaustive")
        OPTIONS["samples"].add_to(p, default=1)
        OPTIONS["cases"].add_to(p, help="user case file (repeatable)")
        OPTIONS["only"].add_to(p, help="run only case ids matching this glob (repeatable)")
        OPTIONS["shard"].add_to(p)
        # selection by meaning (run/selection.py): each repeatable, combined with each other and with --only
        for name in ("reduction", "log_target", "dtype", "family"):
            OPTIONS[name].add_to(p, help=OPTIONS[name].help + " (repeatable)")

    def add_gate_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--strict", action="store_true",
                       help="exit 1 if a divergence is neither documented nor known; exit 3 (with any gate) if a "
                            "framework did not run, a run stopped early, or nothing was judged")
        OPTIONS["baseline"].add_to(p, help="an earlier run or merged directory, or the file its --write-baseline "
                                           "wrote: report what is new, fixed and changed since")
        p.add_argument("--write-baseline", metavar="FILE",
                       help="also write these results as a compact baseline file (gzip'd JSON lines, the same "
                            "bytes for the same results) that --baseline reads: the file a CI job commits")
        p.add_argument("--fail-on-new", action="store_true",
                       help="with --baseline: exit 1 if a divergence is new or changed since the baseline "
                            "(and neither documented nor known), or a result it judged is lost (unsupported, "
                            "crashed or missing now)")
        OPTIONS["known"].add_to(p, help=OPTIONS["known"].help + " the command")
        p.add_argument("--force", action="store_true",
                       help="remove the files an earlier run or report recorded writing into --out (run.json or "
                            "runs.json: `written`), and nothing else; refused where no such record is, or where "
                            "an input of this command would be removed; without it a non-empty --out is refused")

    def add_port_options(p: argparse.ArgumentParser) -> None:  # a port judged like a framework (docs/guide/ports.md)
        OPTIONS["like"].add_to(p)
        OPTIONS["like_run"].add_to(p)
        p.add_argument("--fail-on-own", action="store_true",
                       help="with --like-run: exit 1 if a divergence neither documented nor known is the port's "
                            "own (not shared with FRAMEWORK's recorded run); with --strict, --strict on those only")
        p.add_argument("--draft-shared", action="store_true",
                       help="with --like-run: write issue drafts for the defects the port shares with FRAMEWORK's "
                            "recorded run too (by default only for its own)")

    run = sub.add_parser("run", parents=[common], help="run cases through a framework and write results and a report")
    run.add_argument("--framework", required=True, metavar="NAME",
                     help="a registered adapter name (e.g. torch, or one an installed package registers by entry "
                          "point), package.module:Class for an adapter class importable from here (a port, a "
                          "private build), or package.module:function for a kl_div of torch's signature on NumPy "
                          "arrays (forward only; docs/guide/ports.md)")
    OPTIONS["api"].add_to(run, metavar=None, help="API dotted name (repeatable; default all)")
    OPTIONS["device"].add_to(run, metavar=None, help="device (repeatable; default all present)")
    OPTIONS["mode"].add_to(run, help="how the calls are made: eager, or a compiled or graph mode the adapter "
                                     "offers (repeatable; default eager; `kl-conformance modes` lists them)")
    OPTIONS["part"].add_to(run, help="forward value or a gradient (repeatable; default every part a case asks for)")
    run.add_argument("--out", default="reports/run", help="output directory (default reports/run)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    run.add_argument("--no-repro", action="store_true",
                     help="do not write reproducers for the undocumented divergences into OUT/repro")
    run.add_argument("--profiles", metavar="DIR",
                     help="directory of <framework>.yaml deviation profiles (default: spec/profiles shipped)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in --out: skip every result already written and redo every "
                          "output stage run.json does not record as done (refused if that run had another seed, "
                          "suite, samples, case files, --only, --shard, --part, --api, --device, --mode, selection "
                          "by meaning, --known, spec, profile set or framework version)")
    OPTIONS["timeout_s"].add_to(run, default=DEFAULT_TIMEOUT_S, metavar=None,
                                help=f"{OPTIONS['timeout_s'].help} (default {DEFAULT_TIMEOUT_S:g})")
    OPTIONS["jobs"].add_to(run)
    run.add_argument("--cache-dir", metavar="DIR",
                     help="where computed expectations are kept for later runs and other frameworks, and JAX's "
                          "compiled kernels (default $KL_CACHE_DIR, else ~/.cache/kl-conformance)")
    run.add_argument("--no-cache", action="store_true",
                     help="compute every expectation and compile every kernel; read and write no cache")
    budget_help = f"{OPTIONS['memory_budget_mb'].help} (default {DEFAULT_MEMORY_BUDGET_MB:g})"
    OPTIONS["memory_budget_mb"].add_to(run, default=DEFAULT_MEMORY_BUDGET_MB, metavar=None, help=budget_help)
    add_case_options(run)
    add_gate_options(run)
    add_port_options(run)

    cases = sub.add_parser("cases", parents=[common], help="list the case ids a run would use")
    cases.add_argument("--count", action="store_true", help="print only the number of cases")
    add_case_options(cases)

    repro = sub.add_parser("repro", parents=[common],
                           help="print a standalone reproducer script for one case (stdout only)")
    repro.add_argument("case_id", metavar="CASE_ID", nargs="?", help="the case (omit with --all)")
    repro.add_argument("--framework", help="adapter name or module:Class (with --all: by default the run's, "
                                           "if it is a registered adapter)")
    repro.add_argument("--all", metavar="OUT_DIR", dest="all_to",
                       help="write a script for every undocumented divergence of --from RUN_DIR into OUT_DIR")
    repro.add_argument("--api", help="API dotted name (default: the framework's first)")
    repro.add_argument("--device", default="cpu")
    OPTIONS["part"].add_to(repro, action="store", default="forward", help=None)
    repro.add_argument("--mode", default="eager", metavar="NAME",
                       help="make the call in this mode (default eager; `kl-conformance modes` lists them); with "
                            "--all each script is made in its row's mode")
    source = repro.add_mutually_exclusive_group()
    source.add_argument("--from", dest="run_dir", metavar="RUN_DIR", help="take the case from an earlier run's --out")
    source.add_argument("--cases", dest="case_file", metavar="FILE", help="take the case from a user case file")
    OPTIONS["seed"].add_to(repro, metavar=None, help=f"seed of a generated case (default: the run's, or {DEFAULT_SEED})")
    repro.add_argument("--no-minimize", action="store_true", help="keep the whole case")
    OPTIONS["memory_budget_mb"].add_to(repro, default=DEFAULT_MEMORY_BUDGET_MB, metavar=None, help=budget_help)
    repro.add_argument("--cache-dir", metavar="DIR", help="with --all: read and store expectations in this reference cache")
    repro.add_argument("--profiles", metavar="DIR", help="the deviation profiles a divergence is judged beside, as "
                                                        "`run --profiles` judges it; with --all, the run's (default: "
                                                        "spec/profiles shipped)")
    OPTIONS["like"].add_to(repro, help="judge the port's call beside FRAMEWORK's profile, as `run --like` judged "
                                       "it (default: the --from run's)")
    repro.add_argument("--progress", action="store_true", help="with --all: print 'progress DONE TOTAL' lines on stdout")

    selftest = sub.add_parser("selftest", parents=[common],
                              help="plant bugs into a real adapter and check that every planted fault is flagged "
                                   "and every gate fails on a broken build (exit 1 if one is not)")
    selftest.add_argument("--framework", required=True, help="adapter name, e.g. torch")
    selftest.add_argument("--variant", action="append", default=[], metavar="NAME",
                          help="run only this planted variant (repeatable; default all)")
    selftest.add_argument("--api", action="append", default=[], help="API dotted name (repeatable; default all)")
    selftest.add_argument("--device", action="append", default=[],
                          help="device (repeatable; default all present), e.g. cuda to check the verdicts on a GPU")
    selftest.add_argument("--mode", action="append", default=[], metavar="NAME",
                          help="plant the faults into the calls of this mode, e.g. inductor, to check the verdicts "
                               "of a compiled mode (repeatable; default eager; `kl-conformance modes` lists them)")
    selftest.add_argument("--out", default="reports/selftest", help="output directory (default reports/selftest)")
    OPTIONS["timeout_s"].add_to(selftest, default=DEFAULT_TIMEOUT_S, metavar=None, help="time limit of one case")
    selftest.add_argument("--no-cache", action="store_true", help="compute every expectation")
    selftest.add_argument("--force", action="store_true",
                          help="replace what an earlier self-test wrote into --out; without it a non-empty --out "
                               "is refused")
    add_case_options(selftest)

    modes = sub.add_parser("modes", parents=[common],
                           help="list each adapter's modes (eager and its compiled or graph modes) and whether each "
                                "can run here, and why not")
    modes.add_argument("--framework", metavar="NAME",
                       help="only this adapter (a registered name or package.module:Class; default every "
                            "registered one)")

    report = sub.add_parser("report", parents=[common], help="merge run directories into one report")
    report.add_argument("runs", nargs="+", metavar="DIR", help="run directories (each with results.jsonl)")
    report.add_argument("--out", required=True, help="directory for the merged report (not one of the runs)")
    report.add_argument("--allow-missing", action="store_true",
                        help="a directory without results shows as 'not run' instead of an error")
    report.add_argument("--mode", action="append", dest="modes", default=[], metavar="NAME",
                        help="report only the rows of this mode (repeatable; default every mode the runs hold)")
    add_gate_options(report)
    add_port_options(report)
    return parser
