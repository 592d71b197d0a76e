"""kl-conformance: a spec-driven reference and conformance harness for kl_div."""

# The harness's release: the one place its version is written. pyproject.toml reads it from here when a wheel
# or sdist is built, so a source tree, an editable install and a wheel of one commit all say the same. A
# release changes it and adds its section to CHANGELOG.md (tests/engine/test_release.py checks the two agree).
__version__ = "0.17.1"
