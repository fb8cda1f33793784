"""Hadoop's file: file system as a local session runs it (resources/java/LocalFiles.java): the
two calls that used to start a `chmod` or `readlink` process answer as Hadoop's own
did, and Delta's commits and Spark's checkpoints go through it."""

import os
import stat

from floeline import spark as floeline_spark


def _file_system(spark, path: str):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(f"file://{path}"), conf), jvm


def test_a_local_session_uses_the_quiet_local_file_system(spark, tmp_path):
    fs, jvm = _file_system(spark, str(tmp_path))
    assert fs.getClass().getName() == "floeline.LocalFiles$Checksummed"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(
        jvm.java.net.URI("file:///"), spark.sparkContext._jsc.hadoopConfiguration())
    assert context.getDefaultFileSystem().getClass().getName() == "floeline.LocalFiles$Context"
    assert floeline_spark.spark_conf("local[2]")["spark.hadoop.fs.file.impl"] == "floeline.LocalFiles$Checksummed"
    for master in ("spark://10.0.0.5:7077", "local-cluster[2,1,1024]"):  # executors elsewhere
        assert "spark.hadoop.fs.file.impl" not in floeline_spark.spark_conf(master)


def test_permissions_are_set_without_chmod(spark, tmp_path):
    fs, jvm = _file_system(spark, str(tmp_path))
    target = tmp_path / "f"
    target.write_text("x")
    for mode in (0o640, 0o755, 0o600, 0o444, 0o000, 0o777):
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(f"file://{target}"),
                         jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert stat.S_IMODE(os.stat(target).st_mode) == mode
    # a directory Hadoop makes with a permission gets exactly it
    made = tmp_path / "made"
    assert fs.mkdirs(jvm.org.apache.hadoop.fs.Path(f"file://{made}"),
                     jvm.org.apache.hadoop.fs.permission.FsPermission(0o750))
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o750


def test_link_status_of_files_directories_and_links(spark, tmp_path):
    fs, jvm = _file_system(spark, str(tmp_path))
    path = jvm.org.apache.hadoop.fs.Path
    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "file", tmp_path / "link")
    plain = fs.getFileLinkStatus(path(f"file://{tmp_path}/file"))
    assert plain.getLen() == 5 and plain.isFile() and not plain.isSymlink()
    assert fs.getFileLinkStatus(path(f"file://{tmp_path}/dir")).isDirectory()
    link = fs.getFileLinkStatus(path(f"{tmp_path}/link"))  # unqualified: Hadoop sees the link
    assert link.isSymlink() and link.getSymlink().toUri().getPath() == f"{tmp_path}/file"
    missing = None
    try:
        fs.getFileLinkStatus(path(f"file://{tmp_path}/nothing"))
    except Exception as exc:  # py4j's wrapper of java.io.FileNotFoundException
        missing = str(exc)
    assert missing is not None and "FileNotFoundException" in missing


def test_delta_commits_and_renames_go_through_it(spark, tmp_path):
    table = str(tmp_path / "t")
    frame = spark.range(10).selectExpr("id", "CAST(id AS STRING) AS s")
    for _ in range(3):
        frame.write.format("delta").mode("append").save(table)
    assert spark.read.format("delta").load(table).count() == 30
    log = sorted(os.listdir(tmp_path / "t" / "_delta_log"))
    assert [n for n in log if n.endswith(".json")] == [f"{v:020d}.json" for v in range(3)]
    assert all(stat.S_IMODE(os.stat(tmp_path / "t" / "_delta_log" / n).st_mode) == 0o644
               for n in log if not os.path.isdir(tmp_path / "t" / "_delta_log" / n))
