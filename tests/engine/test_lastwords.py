"""A crash row quotes the framework's last words steadied (conformance/run/lastwords.py): two crashes of one call
in two processes read alike, and a stack trace's frames never crowd out what the framework said."""

from __future__ import annotations

from conformance.run.lastwords import last_words

# glog's fatal handler as OneFlow's SIGABRT printed it, once per process: ASLR moves every address, and the time
# and thread differ
ABORT = """\x1b[1m\x1b[38;2;255;000;000mError\x1b[0m: Cannot find the kernel matching Current OperatorConf.
F20261129 03:45:10.{micros} {tid} kernel.cpp:48] Check failed: kernel found
*** Check failure stack trace: ***
    @     0x{base}9db3  _PyEval_EvalFrameDefault
    @     0x{base}b50a0  _PyEval_Vector
*** SIGABRT received at time={when} on cpu 1 ***
PC: @     0x{base}2a3c  (unknown)  raise
    @     0x{base}ae55  _PyEval_EvalFrameDefault
"""


def test_two_processes_crashing_alike_read_alike(tmp_path):
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    first.write_text(ABORT.format(micros="541091", tid="17303", base="7f1cd906", when="1732851234"))
    second.write_text(ABORT.format(micros="009876", tid="21317", base="7fdd92c6", when="1732851299"))
    assert last_words(first) == last_words(second)


def test_the_framework_s_words_are_kept_and_frames_left_out(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text(ABORT.format(micros="541091", tid="17303", base="7f1cd906", when="1732851234"))
    assert last_words(log) == ("Error: Cannot find the kernel matching Current OperatorConf. | F kernel.cpp:48] Check "
                               "failed: kernel found | *** Check failure stack trace: *** | *** SIGABRT received at "
                               "time=… on cpu 1 ***")


def test_a_log_of_frames_only_still_says_something(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("    @     0x7f1cd9069db3  _PyEval_EvalFrameDefault\n")
    assert last_words(log) == "@     0x…  _PyEval_EvalFrameDefault"


def test_no_log_or_an_empty_one_is_nothing(tmp_path):
    (tmp_path / "empty.log").write_text("\n\n")
    assert last_words(tmp_path / "empty.log") == last_words(tmp_path / "missing.log") == "(nothing)"


def test_the_quote_is_bounded_from_its_end(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("x" * 1000 + "\nthe last words\n")
    words = last_words(log, limit=50)
    assert len(words) == 50 and words.endswith("x | the last words")


def test_an_op_described_by_a_map_reads_alike_whatever_its_hash_order(tmp_path):
    """OneFlow describes the op it aborts in by its argument dtypes, in a hash map's order that changes from process
    to process (seen in two runs of the matrix: target_0 first, then input_0 first)."""
    said = []
    for order in (("target_0", "input_0", "out_0"), ("input_0", "out_0", "target_0")):
        log = tmp_path / f"{order[0]}.log"
        entries = "".join(f" DataType_Name of {name}: kFloat16\n" for name in order)
        log.write_text(f" op_type_name: kl_div_loss\n{entries}"
                       "F20261129 03:45:10.541091 17303 singleton.h:35] Check failed: Get() == nullptr\n")
        said.append(last_words(log))
    assert said[0] == said[1]
    assert said[0].index("input_0") < said[0].index("out_0") < said[0].index("target_0")
