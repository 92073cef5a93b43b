"""Checkpoint files: atomic, checksummed, the previous good one kept and used when the newest is corrupt."""

import logging

import pytest

from pollux.agent.checkpoint import HEADER, CheckpointStore, frame, unframe
from pollux.errors import CheckpointError


def test_save_then_load_returns_the_newest_payload(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.load_latest() is None
    store.save(b"one")
    path = store.save(b"two")
    loaded = CheckpointStore(tmp_path).load_latest()
    assert (loaded.path, loaded.payload) == (path, b"two")


def test_only_the_newest_two_files_are_kept(tmp_path):
    store = CheckpointStore(tmp_path)
    for i in range(5):
        store.save(f"payload {i}".encode())
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-00000003.plx", "ckpt-00000004.plx"]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[: len(data) - 3], "partial write"),  # truncated payload
        (lambda data: data[:-1] + bytes([data[-1] ^ 0xFF]), "sha256"),  # flipped bits
        (lambda data: data[:10], "shorter than"),  # torn header
        (lambda data: b"garbage!" + data[8:], "bad magic"),
    ],
)
def test_a_corrupt_newest_checkpoint_is_detected_and_the_previous_good_one_used(tmp_path, caplog, damage, reason):
    store = CheckpointStore(tmp_path)
    good = store.save(b"good state")
    newest = store.save(b"newer state")
    newest.write_bytes(damage(newest.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="pollux.agent.checkpoint"):
        loaded = CheckpointStore(tmp_path).load_latest()
    assert (loaded.path, loaded.payload) == (good, b"good state")
    assert f"checkpoint {newest} is corrupt" in caplog.text
    assert reason in caplog.text
    assert f"restoring from the previous good checkpoint {good}" in caplog.text


def test_saving_after_a_fallback_keeps_the_good_checkpoint_not_the_corrupt_one(tmp_path):
    store = CheckpointStore(tmp_path)
    good = store.save(b"good")
    bad = store.save(b"bad")
    bad.write_bytes(b"x")
    restarted = CheckpointStore(tmp_path)
    assert restarted.load_latest().payload == b"good"
    newest = restarted.save(b"newest")
    assert sorted(tmp_path.iterdir()) == [good, newest]


def test_only_corrupt_checkpoints_is_an_error_that_says_what_to_do(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(b"a").write_bytes(b"")
    with pytest.raises(CheckpointError, match="delete these files"):
        store.load_latest()


def test_temporary_files_of_an_interrupted_save_are_ignored(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(b"done")
    (tmp_path / ".ckpt-00000001.plx.abc.tmp").write_bytes(frame(b"half")[: HEADER.size + 1])
    assert store.load_latest().payload == b"done"


def test_frame_round_trips():
    assert unframe(frame(b"\x00payload")) == b"\x00payload"
