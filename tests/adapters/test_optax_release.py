"""What differs by optax release (issue 30): optax before 0.1.8 has no public optax.losses (0.1.7 keeps
kl_divergence in the private optax._src.loss), so optax is not run there, with that reason in one line and no
traceback; and JAX 0.4.13, which such an optax runs on, has no jax_compilation_cache_dir, which the run notes
and goes on without. On optax 0.1.8 and later both APIs run. tox -e tests-optax-old runs this file on optax 0.1.7.
"""

from __future__ import annotations

import json

from conformance.cli import main

FRAMEWORK = "optax"
ONLY = "fwd/none/*/4x6/float32/softmax/*"


def _public_losses() -> bool:
    import optax

    return hasattr(optax, "losses")


def _jax_takes_the_cache_option() -> bool:
    import jax

    try:
        jax.config.jax_compilation_cache_dir
    except AttributeError:
        return False
    return True


def test_a_release_without_public_losses_is_not_run_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    # the reference cache and JAX's compilation cache are on (no --no-cache): the harness's options never stop it
    assert main(["run", "--framework", "optax", "--only", ONLY, "--part", "forward", "--out", str(out),
                 "--no-progress", "--no-repro"]) == 0
    captured = capsys.readouterr()
    manifest = json.loads((out / "run.json").read_text())
    assert "Traceback" not in captured.out + captured.err
    if _public_losses():
        assert manifest["status"] == "complete" and "apis_not_run" not in manifest
    else:
        import optax

        why = (f"optax {optax.__version__} has no optax.losses: the public optax.losses came in optax 0.1.8; this "
               "release keeps kl_divergence in its private optax._src.loss")
        assert manifest["status"] == "not_run" and manifest["reason"] == why
        assert [line for line in captured.out.splitlines() if "not run" in line] == [
            f"optax: not run: {why}. Report: {out / 'report.md'}"]
        assert (out / "report.md").read_text().count(why) == 1
    notes = [line for line in captured.err.splitlines() if "jax_compilation_cache_dir" in line]
    if _jax_takes_the_cache_option():
        assert notes == [] and "notes" not in manifest
    else:
        assert len(notes) == 1 and "the run goes on without JAX's persistent compilation cache" in notes[0]
        assert any("jax_compilation_cache_dir" in note for note in manifest["notes"])
