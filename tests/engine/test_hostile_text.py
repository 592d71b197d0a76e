"""Hostile text in a case file, a spec, a profile, a row or a framework message never becomes code in a
reproducer: property tests over generated text (quotes, triple quotes, line breaks, backslashes, `\\N{...}`,
NUL, lone surrogates, long strings), and one test per attack found on main.

Each reproducer is rendered twice, once with the hostile text and once with plain text of the same role; the
two must have the same code once string literals (and, in R, comments) are set aside, so nothing from the
input can be a statement. No framework is needed: adapters render reproducers without importing theirs.
"""

from __future__ import annotations

import ast
import random
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conformance.adapters.keras import REDUCTIONS as KERAS_REDUCTIONS
from conformance.adapters.registry import get_adapter
from conformance.core.model import Expected
from tests.helpers import code_without_strings, make_case

PYTHON_ADAPTERS = ["torch", "oneflow", "paddle", "mindspore", "mlx", "optax", "keras"]
DEVICES = {"keras": "tensorflow:cpu"}
PARTS = ("forward", "grad_input", "grad2_input")
FRAGMENTS = ['"""', "'''", '"', "'", "\\", "\n", "\r", "\r\n", "\x00", "\ud800", "\udfff", "\\N{x}", "\\N{",
             "\\x", "\\u12", "#", "__import__('os').system('touch pwned')", ");", "}", "{", "%s", "\u2028", "\x0c",
             "\ufeff", "é", "\U0001f600", "`", "$", "<script>", "a", " "]

hostile_text = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=12).map("".join),
    st.text(st.characters(exclude_categories=()), min_size=1, max_size=40),  # surrogates included
    st.tuples(st.sampled_from(FRAGMENTS), st.integers(1000, 10_000)).map(lambda p: (p[0] * p[1])[:10_000]),
)


def _render(name: str, text: dict[str, str]) -> list[tuple[str, str]]:
    """Every reproducer of the adapter `name` for one case whose texts come from `text`."""
    adapter = get_adapter(name)
    case = make_case([[-1.0, -2.0]], [[0.5, 0.5]], reduction=text["reduction"], case_id=text["id"],
                     log_target=name == "mlx")
    about = (f"Reproduces kl_div case {case.id} on an API (cpu, forward).",
             f"kl-conformance, spec x: {text['message']}", f"params: {case.params}; dtype: {case.dtype}.")
    expectations = [Expected(result_dtype=text["spec"], shape=(1,), value=np.zeros(1)),
                    Expected(result_dtype=None, error_id=text["spec"], error_type=text["message"])]
    return [adapter.repro_script(case, api, DEVICES.get(name, "cpu"), part, about, expected)
            for api in adapter.apis for part in PARTS for expected in expectations]


def _python_code(script: str) -> str:
    """The script's syntax tree with every string constant emptied: what could run."""
    tree = ast.parse(compile(script, "<repro>", "exec", flags=ast.PyCF_ONLY_AST))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


PLAIN = {"id": "plain-id", "reduction": "plain-reduction", "message": "plain message", "spec": "plain-spec"}


@pytest.mark.parametrize("name", PYTHON_ADAPTERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.fixed_dictionaries({k: hostile_text for k in PLAIN}))
def test_python_reproducers_compile_and_take_text_only_as_strings(name, data):
    assume(data["reduction"] not in KERAS_REDUCTIONS)  # Keras states its own name of those three
    plain = [_python_code(script) for script, _ in _render(name, PLAIN)]
    for (script, suffix), code in zip(_render(name, data), plain):
        assert suffix == ".py"
        assert _python_code(script) == code  # compiles, and has the plain text's code
        script.encode("utf-8")  # no lone surrogate left unescaped: the file can be written


def _r_parts(script: str) -> list[str]:
    """An R script split as R reads it: each string literal and comment becomes a marker, the rest stays."""
    out, i, n = [], 0, len(script)
    code = []
    while i < n:
        ch = script[i]
        if ch == '"':
            j = i + 1
            while script[j] != '"':
                j += 2 if script[j] == "\\" else 1
            out.append("".join(code))
            code, i = [], j + 1
            out.append("<string>")
        elif ch == "#":
            j = script.find("\n", i)
            out.append("".join(code))
            code, i = [], (n if j < 0 else j)
            out.append("<comment>")
        else:
            code.append(ch)
            i += 1
    return out + ["".join(code)]


@settings(max_examples=60, deadline=None)
@given(data=st.fixed_dictionaries({k: hostile_text for k in PLAIN}))
def test_r_reproducers_take_text_only_as_strings_and_comments(data):
    plain = [_r_parts(script) for script, _ in _render("rtorch", PLAIN)]
    for (script, suffix), parts in zip(_render("rtorch", data), plain):
        assert suffix == ".R"
        assert script.isascii()  # every character outside ASCII is an escape: no line break R might see
        assert _r_parts(script) == parts


RSCRIPT = shutil.which("Rscript")
R_TOKENS = """
for (f in commandArgs(trailingOnly = TRUE)) {
  p <- getParseData(parse(f, keep.source = TRUE, encoding = "UTF-8"))
  p <- p[p$terminal & !(p$token %in% c("STR_CONST", "COMMENT")), ]
  writeLines(c(paste("==", basename(f)), paste(p$token, p$text)), stdout())
}
"""


@pytest.mark.skipif(RSCRIPT is None, reason="Rscript is not installed: R's own parser is not available")
def test_r_reproducers_parse_in_r_with_the_plain_texts_code(tmp_path):
    """R's parser reads every script (NUL and lone surrogates, which no R string holds, used to make the
    script unparseable), and its tokens outside strings and comments are those of the plain text's."""
    rng = random.Random(26)
    texts = [{k: "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 10))) for k in PLAIN}
             for _ in range(12)]
    texts += [{k: f for k in PLAIN} for f in FRAGMENTS]
    for i, text in enumerate([PLAIN, *texts]):
        for j, (script, _) in enumerate(_render("rtorch", text)):
            (tmp_path / f"{i:03d}-{j:02d}.R").write_text(script, encoding="utf-8")
    files = sorted(str(p) for p in tmp_path.glob("*.R"))
    (tmp_path / "tokens.R").write_text(R_TOKENS)
    done = subprocess.run([RSCRIPT, str(tmp_path / "tokens.R"), *files], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    streams = {}
    for block in done.stdout.split("== ")[1:]:
        name, _, tokens = block.partition("\n")
        streams[name] = tokens
    assert len(streams) == len(files)
    for name, tokens in streams.items():
        assert tokens == streams[f"000-{name[4:]}"], name


# One test per attack found on main.

@pytest.mark.parametrize("text", ['a"""; __import__("os").system("touch pwned"); """', "x\\N{x}", "a\x00b",
                                  "a\ud800b", 'mean"""\n__import__("os").system("touch pwned")\n"""'])
def test_a_case_id_or_reduction_stays_in_its_string(text):
    """The issue's attacks: an id closing the docstring, `\\N{x}` (a SyntaxError once in a docstring), NUL, a
    lone surrogate; the reduction too, whose repr did not escape a triple quote inside the docstring."""
    for script, _ in _render("torch", {**PLAIN, "id": text, "reduction": text}):
        assert "__import__" not in code_without_strings(script)
        assert script.encode("utf-8")  # a lone surrogate is escaped, so the file can be written


def test_spec_text_in_a_python_comment_stays_a_comment():
    """The expected value's dtype was written in a comment as it stood: a line break in it ended the
    comment and the rest ran."""
    for script, _ in _render("torch", {**PLAIN, "spec": "float32\n__import__('os').system('touch pwned')"}):
        assert "__import__" not in code_without_strings(script)


def test_spec_text_in_an_r_script_stays_a_string():
    """The R script wrote the expected dtype between quotes as it stood: a quote in it ended the string."""
    for script, _ in _render("rtorch", {**PLAIN, "spec": 'float32"); system("touch pwned"); ("'}):
        assert "system" not in "".join(_r_parts(script))


@pytest.mark.parametrize("name", ["torch", "mlx", "rtorch"])
@pytest.mark.parametrize("field", ["device", "dtype", "layout", "part"])
def test_names_written_as_code_must_be_known(name, field):
    """A device, dtype, layout or part is written as code (`mx.cpu`, `torch.float32`): one a run directory or
    case file made up is refused instead (mlx wrote `mx.{device}` for any device)."""
    adapter = get_adapter(name)
    evil = "cpu; __import__('os').system('touch pwned')"
    case = make_case([[-1.0]], [[0.5]], dtype=evil if field == "dtype" else "float32",
                     layout=evil if field == "layout" else "contiguous")
    device, part = (evil if field == "device" else "cpu"), (evil if field == "part" else "forward")
    with pytest.raises(ValueError, match=f"unknown {field}"):
        adapter.repro_script(case, adapter.apis[0], device, part, ("a", "b", "c"), Expected(result_dtype="float32",
                                                                                          shape=(), value=np.zeros(())))


def test_reproducer_names_are_unique_bounded_and_plain():
    from conformance.core.rundirs import script_name

    ids = ["col/x", "col_x", "col\\x", "a" * 300, "é" * 200 + "x", "é" * 200 + "y", "../../../etc/passwd", "..",
           ".hidden", "a\x00b", "a\ud800b", "a\nb", "fwd/sum/log_target=0/4x6/float32/softmax/s0"]
    names = [script_name(i, "torch.nn.functional.kl_div", "cpu", "forward", ".py") for i in ids]
    assert len(set(names)) == len(ids)  # col/x and col_x used to be one file, the second replacing the first
    for name in names:
        assert len(name.encode()) <= 255 and name.isascii() and "/" not in name and "\\" not in name
        assert not name.startswith(".") and name.endswith(".py") and "\x00" not in name
    assert names[-1].startswith("fwd_sum_log_target=0_4x6_float32_softmax_s0__torch.nn.functional.kl_div__cpu__")



@pytest.mark.parametrize("case_id", ["--all=/tmp/elsewhere", "-x", "a'; touch pwned; '", "$(touch pwned)", "a\nb",
                                     "`touch pwned`"])
def test_the_reports_repro_command_gives_the_case_id_as_one_argument(case_id, tmp_path):
    """The report prints `kl-conformance repro ... > repro.py && python repro.py`: a shell reads it, then the
    command's own parser. An id must reach both as itself: one word on the command's one line (a line break is
    quoted as bash's $'\\n'), and never an option (`--all=DIR` was one)."""
    import subprocess

    from conformance.cli import build_parser
    from conformance.report.reprocommand import repro_command
    from tests.helpers import make_result

    row = make_result(case_id=case_id, source="-cases.yaml")
    command = repro_command(row, {"seed": 7})
    assert "\n" not in command and command.startswith("kl-conformance ")
    head, tail = command.rsplit(" > ", 1)
    assert tail == "repro.py && python repro.py"
    # the words bash gives the command (printf in its place: the shell, not the harness, reads them)
    printed = subprocess.run(["bash", "-c", "printf '%s\\0' " + head], cwd=tmp_path, capture_output=True, check=True)
    words = printed.stdout.decode().split("\0")[:-1]
    assert not list(tmp_path.iterdir())  # nothing in the id ran
    args = build_parser().parse_args(words[1:])
    assert (args.command, args.case_id, args.case_file, args.all_to, args.run_dir) == \
        ("repro", case_id, "-cases.yaml", None, None)


@pytest.mark.parametrize("word,like,profiles", [
    ("x:y; touch pwned", "../evil", "/p\n$(touch pwned)"), ("$(touch pwned):a", "a b", "--all=/tmp/x"),
    ("pkg.mod:Port", "torch", "`touch pwned`")])
def test_what_a_reproduce_command_takes_from_run_json_is_a_word_of_its_option(word, like, profiles, tmp_path):
    """run.json is read as found: its --framework word, --like and --profiles reach the printed command as one word
    each of their own option, and a framework word that is not a `package.module:Class` path, or a --like that is
    not a framework's name, is left out (the row's framework name instead)."""
    import subprocess

    from conformance.cli import build_parser
    from conformance.report.reprocommand import repro_command
    from tests.helpers import make_result

    row = make_result(case_id="c")
    run = {"framework": word, "like": like, "profiles": profiles, "selection": {"adapter": row.framework}}
    head = repro_command(row, run).rsplit(" > ", 1)[0]
    printed = subprocess.run(["bash", "-c", "printf '%s\\0' " + head], cwd=tmp_path, capture_output=True, check=True)
    args = build_parser().parse_args(printed.stdout.decode().split("\0")[:-1][1:])
    assert not list(tmp_path.iterdir())  # nothing in run.json ran
    assert args.framework == (word if word == "pkg.mod:Port" else row.framework)
    assert (args.like, args.profiles, args.case_id) == (like if like == "torch" else None, profiles, "c")



def test_a_bare_cpu_is_still_a_keras_device():
    """Keras' devices are qualified ("tensorflow:cpu"); `repro`'s default "cpu", which the loaded adapter takes
    as its backend's CPU, is not refused as an unknown name."""
    from conformance.adapters.base import check_script_names

    adapter = get_adapter("keras")
    case = make_case([[-1.0, -2.0]], [[0.5, 0.5]], reduction="sum")
    check_script_names(case, "cpu", "forward", adapter.known_devices)
    with pytest.raises(ValueError, match="unknown device"):
        check_script_names(case, "tensorflow:cpu; import os", "forward", adapter.known_devices)
