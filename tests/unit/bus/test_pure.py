"""Pure parts of the bus library: stream contract, consumer settings, dead letters, ack subjects."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib

import pytest
from nats.js.api import RetentionPolicy, StorageType

from corral_bus import ConsumerSpec, PublishError, PublishFailure, StreamSettings, stream_configs
from corral_bus.acks import ack_sequence
from corral_bus.connection import server_list
from corral_bus.deadletter import (
    MAX_KEPT_HEADER_VALUE,
    MAX_KEPT_HEADERS,
    MAX_KEPT_PAYLOAD,
    DeadReason,
    dead_letter,
)
from corral_bus.history import history_config, recorded
from corral_bus.lease import LeaseRecord, _read
from corral_bus.pull import ack_metadata
from corral_bus.streams import contract_configs, tombstone_headers
from corral_cli.commands.bus import DEFAULT_HISTORY_AGE, DEFAULT_HISTORY_SIZE, duration, size
from corral_model import codec, subjects
from corral_model.envelopes import DeadLetter


def test_streams_follow_the_contract() -> None:
    by_name = {c.name: c for c in stream_configs(StreamSettings(objects_history=7))}
    assert set(by_name) == {
        subjects.OBJECTS_STREAM,
        *subjects.COMMAND_STREAMS,
        subjects.RESULTS_STREAM,
        subjects.DEAD_STREAM,
        subjects.ADVISORIES_STREAM,
        subjects.HISTORY_STREAM,
    }
    assert by_name[subjects.ADVISORIES_STREAM].subjects == ["$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"]
    objects = by_name[subjects.OBJECTS_STREAM]
    assert objects.subjects == ["lh.obj.>"]
    assert objects.max_msgs_per_subject == 7
    assert objects.allow_msg_ttl
    # No one may cut the API server's copy short: no rollups, purges or message deletes.
    assert objects.allow_rollup_hdrs is False and objects.deny_purge and objects.deny_delete
    # Each sender's commands in a work queue of their own: deduplication is per stream.
    for service in subjects.COMMAND_SENDERS:
        commands = by_name[subjects.command_stream(service)]
        assert commands.subjects == [f"lh.cmd.{service}.>"]
        assert commands.retention == RetentionPolicy.WORK_QUEUE
        assert commands.duplicate_window > 0
    assert by_name[subjects.RESULTS_STREAM].max_age == 7 * 24 * 3600
    assert by_name[subjects.DEAD_STREAM].subjects == ["lh.dead.>"]


def test_the_history_records_every_contract_stream_but_the_dead_letters() -> None:
    """LH_HISTORY is built from the contract's definitions: limits streams are its sources, and a
    work-queue stream republishes into it (a source would keep the queue from draining). A stream
    added to the contract (one command stream per service, say) is recorded without another change."""
    s = StreamSettings(history_max_age=3600, history_max_bytes=10_000)
    contract = recorded(contract_configs(s, StorageType.FILE))
    history = history_config(contract, max_age=3600, max_bytes=10_000, replicas=3, storage=StorageType.FILE)
    assert [source.name for source in history.sources or []] == [
        subjects.OBJECTS_STREAM,
        subjects.RESULTS_STREAM,
    ]
    by_name = {c.name: c for c in contract}
    for stream in subjects.COMMAND_STREAMS:  # every sender's command stream, with nothing else to do
        commands = by_name[stream].republish
        assert commands is not None and (commands.src, commands.dest) == (">", "lh.hist.>")
    assert history.subjects == ["lh.hist.>"]
    assert (
        by_name[subjects.DEAD_STREAM].republish is None and by_name[subjects.OBJECTS_STREAM].republish is None
    )
    assert (history.max_age, history.max_bytes, history.num_replicas) == (3600, 10_000, 3)
    # Never a longer dedup window than an origin's: a retry republished after it is a new message.
    assert history.duplicate_window == min(c.duplicate_window or 0 for c in contract[:3])
    more = dataclasses.replace(contract[0], name="LH_OBJECTS_MORE", subjects=["lh.obj2.>"])
    added = history_config(
        recorded([*contract_configs(s, StorageType.FILE), more]),
        max_age=3600,
        max_bytes=10_000,
        replicas=1,
        storage=StorageType.FILE,
    )
    assert "LH_OBJECTS_MORE" in [source.name for source in added.sources or []]
    assert {c.name: c for c in stream_configs(s)}[subjects.HISTORY_STREAM].max_bytes == 10_000
    toy = StreamSettings(command_senders=(*subjects.COMMAND_SENDERS, "toy"))
    assert {c.name: c for c in stream_configs(toy)}[subjects.command_stream("toy")].republish == commands


def test_history_retention_options_read_kubernetes_quantities() -> None:
    assert duration(DEFAULT_HISTORY_AGE) == StreamSettings().history_max_age
    assert size(DEFAULT_HISTORY_SIZE) == StreamSettings().history_max_bytes
    assert (duration("36h"), duration("90m"), duration("600")) == (129600, 5400, 600)
    assert (size("512Mi"), size("2G"), size("100")) == (512 * 1024**2, 2 * 1024**3, 100)
    with pytest.raises(argparse.ArgumentTypeError):
        size("lots")


def test_tombstone_headers() -> None:
    assert tombstone_headers(86400) == {"Nats-TTL": "86400s"}
    assert tombstone_headers(0.2)["Nats-TTL"] == "1s"  # the server's minimum


def test_backoff_per_delivery() -> None:
    spec = ConsumerSpec(stream="S", durable="d", backoff=(1.0, 5.0, 30.0))
    assert [spec.delay_after(n) for n in (1, 2, 3, 4, 9)] == [1.0, 5.0, 30.0, 30.0, 30.0]
    assert ConsumerSpec(stream="S", durable="d", backoff=()).delay_after(3) == 0.0


def test_consumer_config_filters() -> None:
    one = ConsumerSpec(stream="S", durable="d", filter_subjects=("lh.cmd.actuator.>",)).consumer_config()
    assert one.filter_subject == "lh.cmd.actuator.>" and one.filter_subjects is None
    two = ConsumerSpec(stream="S", durable="d", filter_subjects=("a.>", "b.>")).consumer_config()
    assert two.filter_subject is None and two.filter_subjects == ["a.>", "b.>"]
    assert two.durable_name == "d" and two.max_ack_pending == 256


def test_dead_letter_keeps_text_or_bytes() -> None:
    text = dead_letter(
        reason_class=DeadReason.UNDECODABLE,
        reason="missing schema field",
        stream="LH_COMMANDS",
        subject="lh.cmd.x",
        consumer="actuator",
        deliveries=1,
        headers={"Nats-Msg-Id": "c1"},
        data=b'{"a": 1}',
    )
    assert isinstance(text, DeadLetter)
    assert text.reason == "undecodable: missing schema field"
    assert text.payload == '{"a": 1}' and text.payload_b64 == ""
    raw = dead_letter(
        reason_class=DeadReason.PERMANENT,
        reason="r",
        stream="S",
        subject="s",
        consumer="c",
        deliveries=2,
        headers=None,
        data=b"\xff\xfe",
    )
    assert raw.payload == "" and raw.payload_b64 == "//4="
    assert raw.payload_size == 2 and raw.payload_sha256 == hashlib.sha256(b"\xff\xfe").hexdigest()
    assert not raw.truncated and not text.truncated


def _letter(data: bytes, headers: dict[str, str] | None = None, keep: int = MAX_KEPT_PAYLOAD) -> DeadLetter:
    return dead_letter(
        reason_class=DeadReason.UNDECODABLE,
        reason="r",
        stream="LH_COMMANDS",
        subject="lh.cmd.x",
        consumer="actuator",
        deliveries=1,
        headers=headers,
        data=data,
        keep=keep,
    )


def test_an_oversize_payload_is_cut_with_its_size_and_digest() -> None:
    big = b"x" * 1_000_000
    letter = _letter(big)
    assert letter.truncated and letter.payload == "x" * MAX_KEPT_PAYLOAD
    assert letter.payload_size == 1_000_000 and letter.payload_sha256 == hashlib.sha256(big).hexdigest()
    assert len(codec.encode(letter)) < 2 * MAX_KEPT_PAYLOAD
    binary = _letter(b"\xff" * 1_000_000)
    assert binary.truncated and base64.b64decode(binary.payload_b64) == b"\xff" * MAX_KEPT_PAYLOAD
    exact = _letter(b"y" * MAX_KEPT_PAYLOAD)
    assert not exact.truncated and exact.payload_size == MAX_KEPT_PAYLOAD


def test_a_cut_through_a_character_keeps_the_text() -> None:
    letter = _letter("é".encode() * 10, keep=5)  # 2 bytes each: the cut splits the third
    assert letter.truncated and letter.payload == "éé" and letter.payload_b64 == ""


def test_oversize_headers_are_cut() -> None:
    headers = {f"h{i}": "v" * (MAX_KEPT_HEADER_VALUE + 10) for i in range(MAX_KEPT_HEADERS + 5)}
    letter = _letter(b"{}", headers)
    assert letter.truncated and len(letter.headers) == MAX_KEPT_HEADERS
    assert {len(v) for v in letter.headers.values()} == {MAX_KEPT_HEADER_VALUE}
    assert not _letter(b"{}", {"traceparent": "00-abc"}).truncated


def test_ack_metadata_both_reply_formats() -> None:
    assert ack_metadata("$JS.ACK.LH_COMMANDS.actuator.3.42.17.1700000000000000000.5") == (
        "LH_COMMANDS",
        3,
        42,
        5,
    )
    v2 = "$JS.ACK._.ACCHASH.LH_OBJECTS.boot.1.9.9.1700000000000000000.0.token"
    assert ack_metadata(v2) == ("LH_OBJECTS", 1, 9, 0)
    with pytest.raises(ValueError, match="not a JetStream delivery"):
        ack_metadata("_INBOX.abc")


def test_publish_error_names_the_first_failure() -> None:
    error = PublishError([PublishFailure("a.b", "id1", "boom"), PublishFailure("c", "id2", "x")])
    assert "2 publish(es)" in str(error) and "a.b [id1]: boom" in str(error) and "1 more" in str(error)


def test_lease_record_reading_tolerates_garbage() -> None:
    assert _read(b"not json") is None
    assert _read(b'{"holder": "pod-a", "ttl": 10, "renewed_at": 1.5}') == LeaseRecord(
        holder="pod-a", ttl=10.0, renewed_at=1.5
    )


def test_every_stream_takes_the_replicas_setting() -> None:
    assert {c.num_replicas for c in stream_configs(StreamSettings(replicas=3))} == {3}
    assert {c.num_replicas for c in stream_configs()} == {1}


def test_a_cluster_url_list_is_split_into_servers() -> None:
    assert server_list("nats://a:4222, nats://b:4222,,nats://c:4222") == [
        "nats://a:4222",
        "nats://b:4222",
        "nats://c:4222",
    ]
    assert server_list("nats://a:4222") == ["nats://a:4222"]
    assert server_list(["nats://a:1", "nats://b:2"]) == ["nats://a:1", "nats://b:2"]


def test_ack_sequence_reads_the_stream_sequence_of_a_pub_ack() -> None:
    assert ack_sequence(b'{"stream":"LH_OBJECTS","seq":1234}') == 1234
    assert ack_sequence(b'{"stream":"LH_OBJECTS","seq":7,"duplicate": true}') == 7
    assert ack_sequence(b'{"stream":"LH_OBJECTS","domain":"d","seq": 9}') == 9
    assert ack_sequence(b'{"error":{"code":503},"seq":0}') == 0
    assert ack_sequence(b"") == 0 and ack_sequence(b'{"seq":"x"}') == 0
