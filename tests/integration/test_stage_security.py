"""Stages keep to their URL, their secrets stay out of the definitions, and `floeline
sql` reads the warehouse's tables only (issue 11 items 6-7, issue 10's shared-bucket
credentials): each case through `floeline sql` as a user runs it, against a file://
stage, an internal stage and an S3 stage on the local S3 (moto), with Spark and Delta."""

from __future__ import annotations

import json
import os
import stat
import uuid

import pytest

from floeline.errors import SqlError

pytestmark = pytest.mark.integration

OUTSIDE = "stage @{stage}: {what} '{path}' is outside the stage"


def rows_of(spark, wh, table):
    frame = spark.read.format("delta").load(wh.resolve([table]).path)
    return sorted(json.loads(r[0].toJson())["n"] for r in frame.collect())


@pytest.fixture
def secret_place(tmp_path):
    """Files beside the stage folder that no statement may read."""
    place = tmp_path / "secret"
    place.mkdir()
    (place / "x.json").write_text('{"n": 666}\n')
    (place / "passwd").write_text('{"n": 667}\n')
    return place


def test_a_file_stage_cannot_be_read_outside_its_url(spark, sql, wh, stage_dir, secret_place):
    (stage_dir / "sub").mkdir()
    (stage_dir / "sub" / "a.json").write_text('{"n": 1}\n')
    sql(f"CREATE TABLE t (v VARIANT); CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)")
    refused = [("COPY INTO t FROM @s/../secret", "path", "../secret"),
               ("COPY INTO t FROM @s/sub/../../secret/", "path", "sub/../../secret/"),
               ("COPY INTO t FROM @s/%2e%2e/secret", "path", "%2e%2e/secret"),
               ("COPY INTO t FROM @s FILES=('../secret/x.json')", "FILES entry", "../secret/x.json"),
               ("COPY INTO t FROM @s FILES=('" + str(secret_place / "x.json") + "')", "FILES entry",
                str(secret_place / "x.json")),
               ("COPY INTO t FROM (SELECT $1 FROM @s/../secret)", "path", "../secret"),
               ("LIST @s/..", "path", ".."),
               ("CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @s/../secret", "path", "../secret")]
    for statement, what, path in refused:
        with pytest.raises(SqlError, match=OUTSIDE.format(stage="s", what=what, path=path)):
            sql(statement)
    # PATTERN filters the stage's own files only: a pattern naming the outside matches nothing there.
    assert sql("COPY INTO t FROM @s PATTERN='.*(secret|passwd|x[.]json).*'") == [
        {"status": "Copy executed with 0 files processed."}]
    assert [r["file"] for r in sql("COPY INTO t FROM @s")] == ["sub/a.json"]
    # A symbolic link out of the stage is refused, naming it: nothing of the load is committed.
    os.symlink(secret_place / "passwd", stage_dir / "sub" / "b.json")
    (stage_dir / "c.json").write_text('{"n": 2}\n')
    with pytest.raises(SqlError, match=r"stage FLOELINE\.PUBLIC\.S: sub/b\.json is a symbolic link to "
                                       r".*/secret/passwd, outside the stage's folder"):
        sql("COPY INTO t FROM @s")
    with pytest.raises(SqlError, match="sub/b.json is a symbolic link"):
        sql("LIST @s")
    assert rows_of(spark, wh, "T") == [1]
    os.remove(stage_dir / "sub" / "b.json")
    os.symlink(stage_dir / "c.json", stage_dir / "sub" / "b.json")  # a link inside the stage is followed
    assert sorted(r["file"] for r in sql("COPY INTO t FROM @s")) == ["c.json", "sub/b.json"]
    assert rows_of(spark, wh, "T") == [1, 2, 2]


def test_an_internal_stage_cannot_reach_another(sql, wh):
    sql("CREATE TABLE t (v VARIANT); CREATE STAGE inner_s FILE_FORMAT=(TYPE=JSON); CREATE STAGE other")
    other = wh.local_schema_dir("FLOELINE", "PUBLIC", "_stage_files", "OTHER")
    other.mkdir(parents=True)
    (other / "o.json").write_text('{"n": 5}\n')
    for statement, what, path in [("LIST @inner_s/../OTHER", "path", "../OTHER"),
                                  ("COPY INTO t FROM @inner_s FILES=('../OTHER/o.json')", "FILES entry",
                                   "../OTHER/o.json")]:
        with pytest.raises(SqlError, match=OUTSIDE.format(stage="inner_s", what=what, path=path)):
            sql(statement)


def test_floeline_sql_reads_warehouse_tables_only(spark, sql, wh, tmp_path):
    outside = tmp_path / "outside_table"
    spark.range(3).write.format("delta").save(str(outside))  # a Delta table outside the warehouse
    (tmp_path / "notes.txt").write_text("not for floeline sql\n")
    sql("CREATE TABLE inside (n NUMBER); INSERT INTO inside SELECT 7")
    assert sql("SELECT n FROM inside") == [{"n": 7}]
    for query in [f'SELECT * FROM delta."{outside}"', f'SELECT * FROM parquet."{outside}"',
                  f'SELECT * FROM text."{tmp_path}/notes.txt"', f'SELECT * FROM csv."{tmp_path}/notes.txt"',
                  f'SELECT n FROM inside UNION ALL SELECT id FROM delta."{outside}"']:
        with pytest.raises(SqlError, match="floeline sql reads warehouse tables by name only"):
            sql(query)
    for statement, reason in [
            (f"CREATE TEMPORARY VIEW v USING text OPTIONS (path '{tmp_path}/notes.txt')", "does not run CREATE"),
            (f"INSERT OVERWRITE DIRECTORY '{tmp_path}/dump' SELECT 1", "INSERT OVERWRITE DIRECTORY"),
            ("SELECT reflect('java.lang.System', 'getenv', 'HOME')", "REFLECT is not supported")]:
        with pytest.raises(SqlError, match=reason):
            sql(statement)
    assert not (tmp_path / "dump").exists()


# ---- S3 stages ------------------------------------------------------------------------


@pytest.fixture
def bucket(aws):
    name = f"sec-{uuid.uuid4().hex[:12]}"
    aws.client("s3").create_bucket(Bucket=name)
    return name


def s3_stage(aws, name: str, bucket: str, secret: str, key_id: str = "AKIDFLOELINE", prefix: str = "in/") -> str:
    return (f"CREATE OR REPLACE STAGE {name} URL='s3://{bucket}/{prefix}' ENDPOINT='{aws.moto_endpoint}' "
            f"CREDENTIALS=(AWS_KEY_ID='{key_id}' AWS_SECRET_KEY='{secret}' AWS_TOKEN='{secret}-token') "
            f"FILE_FORMAT=(TYPE=JSON)")


def big_json(first: int, count: int) -> bytes:
    """Over the driver-read limit (1 MiB): Spark reads it through s3a."""
    return "".join(json.dumps({"n": n, "pad": "x" * 1500}) + "\n" for n in range(first, first + count)).encode()


def test_an_s3_stage_lists_and_loads_under_its_prefix_only(sql, aws, bucket):
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key="in/a.json", Body=b'{"n": 1}\n')
    s3.put_object(Bucket=bucket, Key="other/x.json", Body=b'{"n": 666}\n')
    s3.put_object(Bucket=bucket, Key="in/../other/y.json", Body=b'{"n": 667}\n')  # s3a would read other/y.json
    s3.put_object(Bucket=bucket, Key="in-sibling/z.json", Body=b'{"n": 668}\n')
    sql(f"CREATE TABLE t (v VARIANT); {s3_stage(aws, 's3s', bucket, 'sk-' + uuid.uuid4().hex)}")
    assert [r["name"] for r in sql("LIST @s3s")] == ["a.json"]
    for statement, what, path in [("LIST @s3s/../other", "path", "../other"),
                                  ("COPY INTO t FROM @s3s/../other/", "path", "../other/"),
                                  ("COPY INTO t FROM @s3s FILES=('../other/x.json')", "FILES entry",
                                   "../other/x.json")]:
        with pytest.raises(SqlError, match=OUTSIDE.format(stage="s3s", what=what, path=path)):
            sql(statement)
    assert [r["file"] for r in sql("COPY INTO t FROM @s3s")] == ["a.json"]


def test_s3_stage_secrets_are_kept_out_of_the_definitions_and_still_load(spark, sql, wh, aws, bucket):
    secret = "stage-secret-" + uuid.uuid4().hex
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key="in/small.json", Body=b'{"n": 1}\n{"n": 2}\n')
    s3.put_object(Bucket=bucket, Key="in/big.json", Body=big_json(100, 800))
    sql(f"""CREATE TABLE t (v VARIANT); {s3_stage(aws, 's3s', bucket, secret)};
            CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @s3s""")
    shown = json.dumps(sql("SHOW STAGES")) + json.dumps(sql("DESCRIBE STAGE s3s")) + json.dumps(sql("SHOW PIPES"))
    assert secret not in shown
    loaded = sql("COPY INTO t FROM @s3s")  # small.json on the driver (boto3), big.json by Spark (s3a)
    assert sorted((r["file"], r["rows_loaded"]) for r in loaded) == [("big.json", 800), ("small.json", 2)]
    assert rows_of(spark, wh, "T") == [1, 2, *range(100, 900)]
    root = wh.root
    holding = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                     if p.is_file() and secret.encode() in p.read_bytes())
    assert holding == ["_secrets/FLOELINE/PUBLIC/_stages/S3S.json"]
    assert stat.S_IMODE((root / holding[0]).stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "_secrets").stat().st_mode) == 0o700
    sql("DROP PIPE p; DROP STAGE s3s")
    assert not any(secret.encode() in p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_two_stages_on_one_bucket_with_other_credentials_are_refused_for_spark_reads(spark, sql, wh, aws, bucket):
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key="a/small.json", Body=b'{"n": 1}\n')
    s3.put_object(Bucket=bucket, Key="b/small.json", Body=b'{"n": 2}\n')
    sql(f"""CREATE TABLE t (v VARIANT);
            {s3_stage(aws, 'stage_a', bucket, 'secret-a', 'AKIDA', 'a/')};
            {s3_stage(aws, 'stage_b', bucket, 'secret-b', 'AKIDB', 'b/')};
            {s3_stage(aws, 'stage_a2', bucket, 'secret-a', 'AKIDA', 'b/')}""")
    # Small loads are read on the driver with each stage's own keys: both work.
    assert [r["file"] for r in sql("COPY INTO t FROM @stage_a")] == ["small.json"]
    assert [r["file"] for r in sql("COPY INTO t FROM @stage_b")] == ["small.json"]
    s3.put_object(Bucket=bucket, Key="a/big.json", Body=big_json(100, 800))
    s3.put_object(Bucket=bucket, Key="b/big.json", Body=big_json(1000, 800))
    assert [r["file"] for r in sql("COPY INTO t FROM @stage_a")] == ["big.json"]  # claims the bucket's s3a
    with pytest.raises(SqlError, match=rf"stage FLOELINE\.PUBLIC\.STAGE_B reads bucket {bucket} with other "
                                       rf"credentials or another endpoint than stage FLOELINE\.PUBLIC\.STAGE_A, .*"
                                       rf"Give every stage on bucket {bucket} .* the same CREDENTIALS and ENDPOINT"):
        sql("COPY INTO t FROM @stage_b")
    # The same credentials share the bucket's client: a second stage with them loads.
    assert [r["file"] for r in sql("COPY INTO t FROM @stage_a2 FILES=('big.json')")] == ["big.json"]
    assert rows_of(spark, wh, "T") == [1, 2, *range(100, 900), *range(1000, 1800)]


def test_s3_stage_credentials_by_reference(sql, wh, aws, bucket, tmp_path, monkeypatch):
    """${env:NAME} / ${file:path:key}: the definition holds the reference, the load
    reads the value in the process that runs it."""
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key="in/a.json", Body=b'{"n": 1}\n')
    props = tmp_path / "aws.properties"
    props.write_text("aws.token=file-token-" + uuid.uuid4().hex + "\n")
    monkeypatch.delenv("FLOELINE_TEST_STAGE_SECRET", raising=False)
    sql(f"""CREATE TABLE t (v VARIANT);
            CREATE STAGE refs URL='s3://{bucket}/in/' ENDPOINT='{aws.moto_endpoint}' FILE_FORMAT=(TYPE=JSON)
              CREDENTIALS=(AWS_KEY_ID='AKIDREF' AWS_SECRET_KEY='${{env:FLOELINE_TEST_STAGE_SECRET}}'
                           AWS_TOKEN='${{file:{props}:aws.token}}')""")
    described = {r["property"]: r["property_value"] for r in sql("DESCRIBE STAGE refs")}
    assert described["AWS_SECRET_KEY"] == "${env:FLOELINE_TEST_STAGE_SECRET}"
    with pytest.raises(SqlError, match="stage FLOELINE.PUBLIC.REFS CREDENTIALS AWS_SECRET_KEY refers to the "
                                       "environment variable FLOELINE_TEST_STAGE_SECRET"):
        sql("COPY INTO t FROM @refs")
    secret = "env-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("FLOELINE_TEST_STAGE_SECRET", secret)
    assert [r["file"] for r in sql("COPY INTO t FROM @refs")] == ["a.json"]
    assert not (wh.root / "_secrets").exists()
    assert not any(secret.encode() in p.read_bytes() for p in wh.root.rglob("*") if p.is_file())


def test_an_s3_warehouse_keeps_stage_secrets_under_its_secrets_prefix(aws, bucket):
    """On an S3 warehouse the definitions and the secrets are separate objects: the
    secret only under `<prefix>/_secrets/` (a bucket policy can keep that to the writers)."""
    from floeline.warehouse import stages
    from floeline.warehouse.catalog import Warehouse
    from floeline.config.locations import S3Settings

    wh = Warehouse(f"s3a://{bucket}/wh", S3Settings.from_settings({
        "floeline.warehouse.s3.endpoint": aws.moto_endpoint, "floeline.warehouse.s3.access.key.id": aws.access_key_id,
        "floeline.warehouse.s3.secret.access.key": aws.secret_access_key}))
    secret = "s3wh-secret-" + uuid.uuid4().hex
    stage = stages.Stage("S3S", "FLOELINE", "PUBLIC", "s3://landing/in/", {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": secret})
    stages.save_stage(wh, stage)
    assert stages.load_stage(wh, "FLOELINE", "PUBLIC", "S3S") == stage
    s3 = aws.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="wh/")["Contents"]]
    holding = [k for k in keys if secret.encode() in s3.get_object(Bucket=bucket, Key=k)["Body"].read()]
    assert holding == ["wh/_secrets/FLOELINE/PUBLIC/_stages/S3S.json"]
    assert "wh/FLOELINE/PUBLIC/_stages/S3S.json" in keys
    assert stages.delete_stage(wh, "FLOELINE", "PUBLIC", "S3S")
    assert s3.list_objects_v2(Bucket=bucket, Prefix="wh/").get("KeyCount", 0) == 0
