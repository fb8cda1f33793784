"""Which objects an SQS message names: S3's events (as S3 and moto write them), the
same wrapped in SNS, test events and noise."""

from __future__ import annotations

import json

from floeline.sources.s3_notifications import S3Object, objects_in, queue_name


def event(key: str, name: str = "ObjectCreated:Put", bucket: str = "landing") -> dict:
    return {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": name,
            "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 7, "eTag": "bb6c"}}}


def test_keys_are_url_decoded_with_plus_for_space():
    body = json.dumps({"Records": [event("dir+a%2Fh%C3%A9llo+w%C3%B6rld%2Bx%3D1.json")]})
    assert objects_in(body) == [S3Object("landing", "dir a/héllo wörld+x=1.json", 7)]


def test_only_created_objects_count():
    body = json.dumps({"Records": [event("a.json"), event("b.json", "ObjectRemoved:Delete"),
                                   event("c.json", "ObjectCreated:CompleteMultipartUpload")]})
    assert [o.key for o in objects_in(body)] == ["a.json", "c.json"]


def test_an_sns_notification_is_unwrapped():
    inner = json.dumps({"Records": [event("raw/x.json")]})
    body = json.dumps({"Type": "Notification", "Message": inner, "TopicArn": "arn:aws:sns:us-east-1:1:t"})
    assert [o.key for o in objects_in(body)] == ["raw/x.json"]


def test_test_events_and_noise_name_nothing():
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "landing"}
    for body in (json.dumps(test_event), "not json", "[]", json.dumps({"Records": "x"}),
                 json.dumps({"Records": [{"eventName": "ObjectCreated:Put"}]})):
        assert objects_in(body) == []


def test_queue_names_are_what_sqs_allows():
    assert queue_name("FLOELINE", "PUBLIC", "EVENTS_PIPE") == "floeline-floeline-public-events_pipe"
    long = queue_name("D", "S", "Ünïcode pipe." + "x" * 100)
    assert len(long) == 80 and set(long) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-")
