"""S3 event notifications through an SQS queue: how an auto-ingest pipe on an S3 stage
learns that a file landed, as Snowpipe does.

CREATE PIPE ... AUTO_INGEST=TRUE on an S3 stage creates the pipe's queue
(`ensure_queue`) at the stage's endpoint; SHOW PIPES prints its ARN as the
notification_channel, the queue to point the bucket's ObjectCreated events at. The pipe
service receives messages (`NotificationQueue.receive`), reads which objects they name
(`objects_in`: S3 events, also wrapped in SNS; test events and other kinds name none),
loads those files, and deletes the messages only after the load's commit, so a crash
leaves them in the queue to come back after the visibility timeout. Duplicates and
out-of-order messages are harmless: the table's load history decides what is new."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import unquote_plus

from floeline.sources import aws

# A message the service took and has not deleted comes back after this long: longer
# than one load takes, so a slow load is not repeated while it runs.
VISIBILITY_TIMEOUT_S = 300
RETENTION_S = 14 * 24 * 3600  # SQS's maximum


@dataclass(frozen=True)
class S3Object:
    """An object an event names: bucket and key (decoded), its size when given."""

    bucket: str
    key: str
    size: int | None = None


def objects_in(body: str) -> list[S3Object]:
    """The created objects a queue message names. S3's own events, the same inside an
    SNS notification, and S3's s3:TestEvent (none). Keys in S3 events are URL-encoded
    with `+` for a space. A body that is not an event names nothing (and is deleted)."""
    try:
        message = json.loads(body)
    except ValueError:
        return []
    if isinstance(message, dict) and message.get("Type") == "Notification" and "Message" in message:
        return objects_in(message["Message"])
    if not isinstance(message, dict) or not isinstance(message.get("Records"), list):
        return []
    found = []
    for record in message["Records"]:
        if not isinstance(record, dict) or not str(record.get("eventName", "")).startswith("ObjectCreated:"):
            continue
        s3 = record.get("s3") or {}
        bucket, obj = (s3.get("bucket") or {}).get("name"), s3.get("object") or {}
        if bucket and obj.get("key") is not None:
            found.append(S3Object(bucket, unquote_plus(str(obj["key"])), obj.get("size")))
    return found


def queue_name(database: str, schema: str, pipe: str) -> str:
    """The pipe's queue: `floeline-<db>-<schema>-<pipe>`, in the characters SQS allows
    (letters, digits, - and _), at most 80 long."""
    raw = f"floeline-{database}-{schema}-{pipe}".lower()
    return re.sub(r"[^a-z0-9_-]", "_", raw)[:80]


@dataclass(frozen=True)
class Message:
    receipt: str
    objects: tuple[S3Object, ...]


class NotificationQueue:
    """One pipe's SQS queue, reached with the pipe's stage's credentials and endpoint."""

    def __init__(self, arn: str, credentials: dict[str, str], endpoint: str | None):
        self.arn = arn
        parts = arn.split(":")  # arn:aws:sqs:<region>:<account>:<name>
        if len(parts) != 6 or parts[2] != "sqs":
            raise ValueError(f"{arn!r} is not an SQS queue ARN")
        self.region, self.account, self.name = parts[3], parts[4], parts[5]
        self.endpoint = endpoint
        self.client = _sqs_client(self.region, credentials, endpoint)
        self._url = None

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = aws.call(f"SQS GetQueueUrl of {self.name}", self.client.get_queue_url,
                                 endpoint=self.endpoint, QueueName=self.name,
                                 QueueOwnerAWSAccountId=self.account)["QueueUrl"]
        return self._url

    def receive(self, wait_s: int = 0, max_messages: int = 100) -> list[Message]:
        """Up to `max_messages` messages, waiting up to `wait_s` for the first."""
        messages: list[Message] = []
        while len(messages) < max_messages:
            got = aws.call(f"SQS ReceiveMessage from {self.name}", self.client.receive_message,
                           endpoint=self.endpoint, QueueUrl=self.url,
                           MaxNumberOfMessages=min(10, max_messages - len(messages)),
                           WaitTimeSeconds=0 if messages else wait_s).get("Messages", [])
            messages += [Message(m["ReceiptHandle"], tuple(objects_in(m.get("Body", "")))) for m in got]
            if not got:
                return messages
        return messages

    def delete(self, messages: list[Message]) -> None:
        """Delete messages (after their files' commit). One that cannot be deleted comes
        back later and finds its file loaded: it is then deleted again."""
        for start in range(0, len(messages), 10):
            chunk = messages[start:start + 10]
            aws.call(f"SQS DeleteMessageBatch on {self.name}", self.client.delete_message_batch,
                     endpoint=self.endpoint, QueueUrl=self.url,
                     Entries=[{"Id": str(i), "ReceiptHandle": m.receipt} for i, m in enumerate(chunk)])


def delete_queue(arn: str, credentials: dict[str, str], endpoint: str | None) -> None:
    """Delete a pipe's queue (DROP PIPE); one already gone is fine."""
    queue = NotificationQueue(arn, credentials, endpoint)
    gone = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
    try:
        url = aws.call(f"SQS GetQueueUrl of {queue.name}", queue.client.get_queue_url, endpoint=endpoint,
                       passthrough=gone, QueueName=queue.name, QueueOwnerAWSAccountId=queue.account)["QueueUrl"]
    except Exception as exc:  # noqa: BLE001 - only the passthrough codes reach here
        if aws.error_code(exc) in gone:
            return
        raise
    aws.call(f"SQS DeleteQueue {queue.name}", queue.client.delete_queue, endpoint=endpoint, QueueUrl=url)


def ensure_queue(name: str, region: str, credentials: dict[str, str], endpoint: str | None) -> str:
    """Create the queue (or find it: CreateQueue is idempotent) and return its ARN."""
    client = _sqs_client(region, credentials, endpoint)
    url = aws.call(f"SQS CreateQueue {name}", client.create_queue, endpoint=endpoint, QueueName=name,
                   Attributes={"VisibilityTimeout": str(VISIBILITY_TIMEOUT_S),
                               "MessageRetentionPeriod": str(RETENTION_S)})["QueueUrl"]
    return aws.call(f"SQS GetQueueAttributes of {name}", client.get_queue_attributes, endpoint=endpoint,
                    QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _sqs_client(region: str, credentials: dict[str, str], endpoint: str | None):
    """An SQS client with a stage's credentials (AWS_KEY_ID, AWS_SECRET_KEY, AWS_TOKEN)."""
    creds = {k.upper(): v for k, v in credentials.items()}
    return aws.client_for("sqs", region=region, access_key_id=creds.get("AWS_KEY_ID"),
                          secret_access_key=creds.get("AWS_SECRET_KEY"),
                          session_token=creds.get("AWS_TOKEN"), endpoint=endpoint)
