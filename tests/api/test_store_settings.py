"""The store's settings (``tflux.open`` keyword arguments and the settings file of a base
directory): defaults, names, validation and what each one changes.
"""

from __future__ import annotations

import json

import pytest
import tflux
from _store_support import info, log_dir_of, setting
from conftest import (
    segment_files,
    segment_name,
)

# --- settings ------------------------------------------------------------------------------------


def test_default_settings(base_dir):
    with tflux.open(base_dir) as store:
        assert setting(store, "LogFileSoftLimit") == str(16 << 20)
        assert setting(store, "LogFileHardLimit") == str(32 << 20)
        assert setting(store, "LogPreallocateSegments") == "true"
        assert setting(store, "SnapshotCreationSegmentsThreshold") == "5"
        assert setting(store, "LogSyncPolicy") == "always"


def test_settings_come_from_the_json_file_and_keywords_override_it(base_dir):
    (base_dir / "taskflux.settings.json").write_text(
        json.dumps(
            {
                "LogFileSoftLimit": 1000,
                "LogFileHardLimit": 5000,
                "LogPreallocateSegments": False,
                "SnapshotCreationSegmentsThreshold": 0,
                "LogSyncPolicy": "never",
            }
        )
    )
    with tflux.open(base_dir) as store:
        assert setting(store, "LogFileSoftLimit") == "1000"
        assert setting(store, "LogFileHardLimit") == "5000"
        assert setting(store, "LogPreallocateSegments") == "false"
        assert setting(store, "SnapshotCreationSegmentsThreshold") == "0"
        assert setting(store, "LogSyncPolicy") == "never"
    with tflux.open(base_dir, log_file_soft_limit=2000, log_sync_policy="always") as store:
        assert setting(store, "LogFileSoftLimit") == "2000"
        assert setting(store, "LogFileHardLimit") == "5000"
        assert setting(store, "LogSyncPolicy") == "always"


def test_segment_limits_from_the_settings_file_take_effect(base_dir):
    (base_dir / "taskflux.settings.json").write_text(
        json.dumps(
            {
                "LogFileSoftLimit": 100,
                "LogFileHardLimit": 200,
                "LogPreallocateSegments": False,
                "SnapshotCreationSegmentsThreshold": 0,
            }
        )
    )
    with tflux.open(base_dir) as store:
        for _ in range(10):
            store.enqueue("", 0, b"x" * 40)  # 16 + 54 + 2 = 72-byte records
    # soft 100: a segment rolls once it holds two records (8 + 144 > 100)
    assert segment_files(log_dir_of(base_dir)) == [segment_name(i) for i in range(0, 11, 2)]
    assert all(
        (log_dir_of(base_dir) / n).stat().st_size < 100 * 2
        for n in segment_files(log_dir_of(base_dir))
    )


def test_preallocated_segments_have_the_soft_limit_size(base_dir):
    with tflux.open(base_dir, log_file_soft_limit=4096, log_file_hard_limit=8192) as store:
        store.enqueue("", 0, b"x")
        assert setting(store, "LogPreallocateSegments") == "true"
    (seg,) = segment_files(log_dir_of(base_dir))
    assert (log_dir_of(base_dir) / seg).stat().st_size == 4096


def test_an_unknown_keyword_setting_is_a_type_error(base_dir):
    with pytest.raises(TypeError):
        tflux.open(base_dir, log_file_limit=10)


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ({"LogFileSoftLimitt": 10}, "LogFileSoftLimitt"),
        ({"logFileSoftLimit": 10}, "logFileSoftLimit"),
        ({"LogFileSoftLimit": "big"}, "LogFileSoftLimit"),
        ({"LogFileSoftLimit": -1}, "LogFileSoftLimit"),
        ({"LogFileSoftLimit": 1.5}, "LogFileSoftLimit"),
        ({"LogPreallocateSegments": "yes"}, "LogPreallocateSegments"),
        ({"SnapshotCreationSegmentsThreshold": -1}, "SnapshotCreationSegmentsThreshold"),
        ({"LogSyncPolicy": "sometimes"}, "LogSyncPolicy"),
        ({"LogSyncPolicy": 1}, "LogSyncPolicy"),
    ],
)
def test_bad_settings_file_entries_are_value_errors_naming_the_key(base_dir, content, key):
    (base_dir / "taskflux.settings.json").write_text(json.dumps(content))
    with pytest.raises(ValueError) as exc:
        tflux.open(base_dir)
    assert key in str(exc.value)


@pytest.mark.parametrize(
    "content", ["not json", "[1, 2]", '{"LogFileSoftLimit": 1', "null"], ids=str
)
def test_a_settings_file_that_is_not_a_json_object_is_a_value_error(base_dir, content):
    (base_dir / "taskflux.settings.json").write_text(content)
    with pytest.raises(ValueError):
        tflux.open(base_dir)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"log_file_soft_limit": 0},
        {"log_file_soft_limit": 2000, "log_file_hard_limit": 1000},
        {"log_sync_policy": "sometimes"},
        {"snapshot_creation_segments_threshold": -1},
    ],
    ids=str,
)
def test_invalid_setting_values_are_value_errors(base_dir, kwargs):
    with pytest.raises(ValueError):
        tflux.open(base_dir, **kwargs)


def test_an_empty_settings_file_means_defaults(base_dir):
    (base_dir / "taskflux.settings.json").write_text("")
    with tflux.open(base_dir) as store:
        assert setting(store, "LogFileSoftLimit") == str(16 << 20)


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_every_sync_policy_keeps_the_data_across_a_reopen(base_dir, policy):
    opts = {"log_sync_policy": policy, "log_preallocate_segments": False}
    if policy == "interval":
        opts["log_sync_interval_ms"] = 5
    with tflux.open(base_dir, **opts) as store:
        assert setting(store, "LogSyncPolicy") == policy
        store.enqueue_many("", [(i % 3, b"%d" % i) for i in range(50)])
        store.ack(store.dequeue("", timeout=0))
    with tflux.open(base_dir, **opts) as store:
        assert info(store, "").count == 49
        assert info(store, "").last_id == 50
