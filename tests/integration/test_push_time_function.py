"""The batch's push time as floeline's JVM function (jvm.register_push_time,
resources/java/PushTime.java): a query reads the value registered last, as a BIGINT,
and the value is never folded into the plan, so each batch runs the same code."""

from floeline import jvm


def test_a_query_reads_the_push_time_registered_last_and_its_plan_holds_no_literal(spark):
    name = jvm.register_push_time(spark, 1_700_000_000_123)
    assert name == jvm.PUSH_TIME_FUNCTION
    query = f"SELECT {name}() AS pushed FROM range(3)"
    df = spark.sql(query)
    assert df.dtypes == [("pushed", "bigint")]
    assert [row.pushed for row in df.collect()] == [1_700_000_000_123] * 3

    jvm.register_push_time(spark, 1_700_000_000_999)  # the next batch
    again = spark.sql(query)
    assert [row.pushed for row in again.collect()] == [1_700_000_000_999] * 3
    plan = again._jdf.queryExecution().optimizedPlan().toString()
    assert name in plan and "1700000000999" not in plan
