"""The line-protocol session adapters of R frameworks use: exact numbers, crash and hang isolation.

The peer here is a small Python program speaking the protocol (R need not be installed for
the session's own guarantees); tests/adapters/test_rtorch.py runs the real R worker.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import textwrap

import pytest

from conformance.adapters.rsession import (RSession, RSessionCrash, RSessionTimeout, decode_numbers, decode_text,
                                           encode_numbers, encode_text)

PEER = textwrap.dedent("""
    import os, signal, sys, tempfile, time
    tempfile.mkdtemp(prefix="Rtmp")  # as R makes its session directory under $TMPDIR
    print("something a package printed while loading", flush=True)
    print("@kl\\tready\\tpid=" + str(os.getpid()), flush=True)
    for line in sys.stdin:
        fields = line.rstrip("\\n").split("\\t")
        if fields[0] == "crash":
            print("about to fail", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if fields[0] == "hang":
            time.sleep(60)
        if fields[0] == "exit":
            sys.exit(3)
        print("a stray line on stdout", flush=True)
        print("@kl\\techo\\t" + "\\t".join(fields), flush=True)
""")


@pytest.fixture
def session():
    s = RSession([sys.executable, "-c", PEER], dict(os.environ), call_timeout_s=5, start_timeout_s=30)
    yield s
    s.close()


def test_handshake_and_reply_skip_stray_output(session):
    assert session.start()[0] == "ready"
    assert session.call(["hello", "world"]) == ["echo", "hello", "world"]


def test_numbers_cross_exactly():
    values = [0.0, -0.0, 1.5, -2.0**-1074, 2.0**-1022 * 0.75, 1e308, math.inf, -math.inf, math.nan, 0.1]
    back = decode_numbers(encode_numbers(values))
    assert [math.copysign(1, v) for v in back[:2]] == [1, -1]
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(back, values))
    assert decode_numbers(encode_numbers([])) == []


def test_numbers_as_r_writes_them():
    """sprintf("%a", c(3, -0, Inf, -Inf, NaN, NA, 1e-310)) in R 4.2."""
    written = "0x1.8p+1,-0x0p+0,Inf,-Inf,NaN,NA,0x0.012688b70e62bp-1022"
    got = decode_numbers(written)
    assert got[:4] == [3.0, 0.0, math.inf, -math.inf] and math.copysign(1, got[1]) == -1
    assert math.isnan(got[4]) and math.isnan(got[5]) and got[6] == 1e-310


def test_text_crosses_tabs_newlines_and_unicode():
    text = "a\tb\nc, d % e ✓"
    field = encode_text(text)
    assert "\t" not in field and "\n" not in field and "," not in field
    assert decode_text(field) == text and decode_text(encode_text("")) == ""


def test_a_crash_is_an_exception_and_the_next_call_restarts(session):
    first = session.start()
    with pytest.raises(RSessionCrash, match=r"SIGSEGV.*about to fail"):
        session.call(["crash"])
    assert session.call(["again"]) == ["echo", "again"]
    assert session.restarts == 1 and session.handshake != first  # a new process (another pid)


def test_an_exit_is_a_crash_with_its_status(session):
    with pytest.raises(RSessionCrash, match="exit status 3"):
        session.call(["exit"])


def test_a_hang_is_killed_at_the_deadline(session):
    session.call_timeout_s = 1
    with pytest.raises(RSessionTimeout, match="killed"):
        session.call(["hang"])
    assert session.call(["after"]) == ["echo", "after"]


def test_a_program_that_never_answers_does_not_start():
    s = RSession([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), start_timeout_s=1)
    with pytest.raises(RSessionTimeout):
        s.start()
    s.close()


def test_what_a_killed_peer_leaves_in_its_temporary_directory_is_removed(tmp_path, monkeypatch):
    """R removes its session directory (Rtmp...) when it exits normally, never when it is killed: each R gets a
    TMPDIR of its own, removed once that R has ended (they piled up in /tmp, seven a test run)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    s = RSession([sys.executable, "-c", PEER], dict(os.environ), call_timeout_s=1, start_timeout_s=30)
    s.start()
    assert len(list(tmp_path.glob("kl-rsession-*/Rtmp*"))) == 1
    with pytest.raises(RSessionTimeout):
        s.call(["hang"])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RSessionCrash):
        s.call(["crash"])  # a fresh peer, then its crash
    assert list(tmp_path.iterdir()) == []
    s.call(["again"])
    assert len(list(tmp_path.glob("kl-rsession-*/Rtmp*"))) == 1
    s.close()
    assert list(tmp_path.iterdir()) == []


def test_a_session_nobody_closed_leaves_no_temporary_directory(tmp_path):
    """An adapter nobody closes (a one-off reproducer, a test's fixture) still ends its R, which removes its
    Rtmp directory; the TMPDIR around it goes when the session is collected, or when Python exits."""
    import subprocess

    script = textwrap.dedent(f"""
        import os, sys, tempfile
        tempfile.tempdir = {str(tmp_path)!r}
        from conformance.adapters.rsession import RSession
        kept = RSession([sys.executable, "-c", {PEER!r}], dict(os.environ), call_timeout_s=5, start_timeout_s=30)
        kept.start()
        dropped = RSession([sys.executable, "-c", {PEER!r}], dict(os.environ), call_timeout_s=5, start_timeout_s=30)
        dropped.start()
        del dropped
        assert len(os.listdir({str(tmp_path)!r})) == 1
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert list(tmp_path.iterdir()) == []
