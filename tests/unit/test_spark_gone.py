"""spark_gone: how a stop signal that reached Spark's JVM first looks from Python."""

from __future__ import annotations

from py4j.protocol import Py4JError

from floeline.ingest.connector import spark_gone


class JavaErrorOfAGoneJvm(Exception):
    """What py4j's Py4JJavaError does when its JVM has ended: its text is asked of the
    JVM, so str() itself fails."""

    def __str__(self) -> str:
        raise ConnectionRefusedError(111, "Connection refused")


def _raised_while_handling(first: BaseException, second: BaseException) -> BaseException:
    try:
        try:
            raise first
        except BaseException:
            raise second
    except BaseException as exc:
        return exc


def test_an_error_whose_text_the_jvm_can_no_longer_give_means_spark_is_gone():
    # As seen in `floeline run` stopped by SIGTERM to its process group on a slow machine:
    # query.stop() failed, and converting that Java error asked the JVM once more.
    exc = _raised_while_handling(JavaErrorOfAGoneJvm(),
                                 Py4JError("An error occurred while calling z:py4j.reflection.TypeUtil.isInstanceOf"))
    assert spark_gone(exc)


def test_a_query_failure_is_not_spark_gone():
    assert not spark_gone(_raised_while_handling(ValueError("bad record"), RuntimeError("query failed")))
    assert spark_gone(RuntimeError("Cannot call methods on a stopped SparkContext"))
