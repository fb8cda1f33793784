"""Snowflake SQL expressions and types -> Spark SQL: the translator a pipe's
transformation, a COPY's SELECT and a `floeline sql` query share.

It sits below ingest (with records) because the connector compiles its own pipes at
run time (the SNOWPIPE method's COPY) and reports column types in Snowflake's words;
it needs sqlglot and floeline.errors only."""
