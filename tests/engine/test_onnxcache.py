"""The exported-model cache (adapters/onnxcache.py): a model is read back only whole and only for its own key, and a
cache that cannot be used costs an export, never a result. That the rows are the same with it, on real torch and
onnxruntime, is tests/adapters/test_torch_modes.py's."""

from __future__ import annotations

import os

import pytest

from conformance.adapters.onnxcache import PREFIX, SUFFIX, ModelCache


class Exports:
    """An export that counts its calls and returns distinct bytes for each key."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def of(self, key: str):
        def export() -> bytes:
            self.calls.append(key)
            return f"model of {key}".encode()
        return export


def entries(directory):
    return sorted(directory.glob(f"{PREFIX}*/*{SUFFIX}"))


def test_a_model_is_exported_once_and_read_back_by_a_later_run(tmp_path):
    exports = Exports()
    first = ModelCache(tmp_path, lambda: "torch 2.13")
    assert first.model("a", exports.of("a")) == b"model of a"
    later = ModelCache(tmp_path, lambda: "torch 2.13")  # another run, the same versions
    assert later.model("a", exports.of("a")) == b"model of a"
    assert later.model("b", exports.of("b")) == b"model of b"
    assert exports.calls == ["a", "b"] and len(entries(tmp_path)) == 2


def test_other_versions_never_read_a_model(tmp_path):
    exports = Exports()
    ModelCache(tmp_path, lambda: "torch 2.13").model("a", exports.of("a"))
    ModelCache(tmp_path, lambda: "torch 2.14").model("a", exports.of("a"))
    assert exports.calls == ["a", "a"] and len(list(tmp_path.glob(PREFIX + "*"))) == 2


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty"])
def test_a_damaged_entry_is_exported_again_not_fed_to_the_runtime(tmp_path, damage):
    exports = Exports()
    ModelCache(tmp_path, lambda: "v").model("a", exports.of("a"))
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes({"truncated": data[:-3], "flipped": data[:-1] + bytes([data[-1] ^ 1]), "empty": b""}[damage])
    assert ModelCache(tmp_path, lambda: "v").model("a", exports.of("a")) == b"model of a"
    assert exports.calls == ["a", "a"]
    assert ModelCache(tmp_path, lambda: "v").model("a", exports.of("a")) == b"model of a"  # rewritten whole
    assert exports.calls == ["a", "a"]


def test_without_a_cache_directory_every_model_is_exported_and_nothing_written(tmp_path):
    exports = Exports()
    cache = ModelCache(None, lambda: "v")
    assert [cache.model("a", exports.of("a")) for _ in range(2)] == [b"model of a"] * 2
    assert exports.calls == ["a", "a"] and list(tmp_path.iterdir()) == []


def test_a_cache_directory_that_cannot_be_written_costs_exports_not_errors(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory should be")
    exports = Exports()
    cache = ModelCache(blocked, lambda: "v")
    assert [cache.model("a", exports.of("a")) for _ in range(2)] == [b"model of a"] * 2
    assert exports.calls == ["a", "a"]


def test_no_folder_is_made_until_a_model_is_asked_for(tmp_path):
    """An eager run of torch makes a ModelCache too: it must leave the cache directory as it was, and never
    import onnx to say what models depend on."""
    asked = []
    ModelCache(tmp_path, lambda: asked.append(1) or "v")
    assert list(tmp_path.iterdir()) == [] and asked == []


def test_a_failed_export_is_not_kept(tmp_path):
    def failing() -> bytes:
        raise RuntimeError("the exporter refused the call")
    cache = ModelCache(tmp_path, lambda: "v")
    with pytest.raises(RuntimeError, match="refused"):
        cache.model("a", failing)
    assert entries(tmp_path) == [] and not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_entries_are_written_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        ModelCache(tmp_path, lambda: "v").model("a", Exports().of("a"))
    finally:
        os.umask(old)
    (entry,) = entries(tmp_path)
    assert entry.stat().st_mode & 0o044 == 0o044
