"""What `floeline <command> --help` says after the arguments: the command's main
settings with their defaults, how it stops, and the docs page to read next (named by
its title: the pages are in floeline's docs/ folder, and the README links them).

The defaults here are checked against the config's own (tests/unit/test_command_help.py)."""

from __future__ import annotations

RUN = """\
main settings of a connector config (properties or Kafka Connect REST JSON), default:
  name                          (required) the connector; checkpoint and group connect-<name>
  connector.class               (none) ...SnowflakeStreamingSinkConnector (4.x) or
                                ...SnowflakeSinkConnector (3.x): whose defaults apply
  floeline.source               kafka      or kinesis (kinesis.stream.name, aws.*)
  topics / topics.regex         (none)     the Kafka topics to read
  bootstrap.servers             localhost:9092   (the local broker: 127.0.0.1:19092)
  snowflake.database.name       FLOELINE
  snowflake.schema.name         PUBLIC
  snowflake.topic2table.map     (none)     topic1:table1,... instead of derived names
  buffer.flush.time             10         seconds between micro-batches (0: back to back)
  buffer.count.records          10000      records per channel and micro-batch
  errors.tolerance              none       none: a bad record stops it; all: DLQ/error table
  errors.retry.timeout          120000     ms a transient fault (broker away) is retried
  floeline.warehouse            ./warehouse   where the tables go (a path or s3a://)
  floeline.checkpoint.dir       <warehouse>/_checkpoints/<name>
  floeline.spark.master         local[2]
stopping: Ctrl-C or SIGTERM stops after the batch in flight commits (exit 0);
  --until-caught-up reads what the source holds now, then exits 0; a terminal error
  exits 1 naming the setting to fix. Spark's log: ~/.cache/floeline/spark-driver.log.
docs: "The Kafka connector" (kafka.md), "The Kinesis connector" (kinesis.md),
  "Operations" (operations.md); every setting in the README's Settings table"""

VALIDATE = """\
checks every key of the config (each error names its key and a fix) without Spark,
lists the keys floeline accepts and ignores (Snowflake-cloud settings), and prints
each topic or stream -> DB.SCHEMA.TABLE. Exit 1 on an invalid config.
docs: "The Kafka connector" (kafka.md), "The Kinesis connector" (kinesis.md)"""

WORKER = """\
main keys of worker.properties (Java properties, as a Kafka Connect worker's), default:
  listeners                     http://127.0.0.1:8083   the REST listener
  floeline.warehouse            $FLOELINE_WAREHOUSE, else ./warehouse
  floeline.spark.master         local[2]
  floeline.pipes                false      true: also run the auto-ingest pipes
  floeline.worker.batch.slots   2 x Spark's parallelism   micro-batches at once
  bootstrap.servers, key.converter, value.converter, security keys
                                (none)     defaults every connector inherits
connectors are created with POST /connectors (a name and the config `floeline run` takes);
  GET /connectors/NAME/status says what a connector waits for or why it failed.
stopping: Ctrl-C or SIGTERM stops every connector after its batch (exit 0); their
  target states stay in the warehouse, so the next start brings each back.
a second worker on the same warehouse waits as a standby (REST: 307 to the active one)
  and takes the connectors over when that one's process is gone or its lease is stale.
docs: "The worker: many connectors in one warm Spark" (worker.md),
  "The worker's REST API" (worker-rest.md)"""

STATUS = """\
reads the tables' Delta logs and the source (no Spark): per table and channel the
committed position, the source's latest, the lag and the last commit; works while the
connector runs or after it stopped. --worker worker.properties instead: the active
worker's REST URL, host and pid, and each stored connector's target state.
docs: "Operations", section "floeline status" (operations.md)"""

SQL = """\
the warehouse: --warehouse DIR, else $FLOELINE_WAREHOUSE, else ./warehouse (relative to
  the current directory: run it where the connector ran, or point at its warehouse).
statements: SELECT (record_metadata:topic, v:id::NUMBER), CREATE/DROP/ALTER/SHOW/DESCRIBE
  TABLE, PIPE, INTERACTIVE TABLE, STAGE, FILE FORMAT; LIST @stage; COPY INTO; OPTIMIZE;
  VACUUM. A failing statement stops the script, named by its line; Spark's own trace
  goes to ~/.cache/floeline/spark-driver.log.
docs: "Tables, pipes and queries" (sql.md), "Stages, COPY INTO and auto-ingest pipes"
  (stages-and-pipes.md)"""

PIPES = """\
the warehouse: --warehouse DIR, else $FLOELINE_WAREHOUSE, else ./warehouse.
runs every AUTO_INGEST=TRUE pipe (CREATE PIPE ... AUTO_INGEST=TRUE AS COPY INTO ...):
  each new file of its stage loads once. Ctrl-C or SIGTERM stops after the loads in
  flight (exit 0); --until-caught-up exits once a poll finds nothing new.
docs: "Stages, COPY INTO and auto-ingest pipes", section "The pipe service"
  (stages-and-pipes.md)"""

SUBMIT = """\
the same job as `floeline run` (or `floeline worker` with --worker) as the driver of a
spark-submit job: --master defaults to the config's floeline.spark.master (local[2]);
a local warehouse must be at the same path on every Spark worker.
docs: "Operations", section "Running on a cluster" (operations.md)"""

KAFKA = """\
the local single-node Apache Kafka broker (KRaft) for quick starts, demos and tests:
  start      on 127.0.0.1:19092 ($FLOELINE_KAFKA_PORT), state in ./.floeline/kafka
             ($FLOELINE_KAFKA_STATE); it keeps running after the command returns
  produce    TOPIC [FILE|-]: JSON lines (one record each) into TOPIC, created if missing;
             --key-field F: each line's field F is the key; --header K=V, repeatable
  status, stop
docs: "The Kafka connector" (kafka.md); a secured broker: "Security" (security.md)"""

KAFKA_PRODUCE = """\
each non-blank line of FILE (or stdin for -) is one JSON value, sent as the record's
value. The broker: --bootstrap-servers, else the local broker of `floeline kafka start`
(127.0.0.1:19092). The topic is created with --partitions (1) when missing.
example: echo '{"order_id": 1, "customer_name": "John"}' | floeline kafka produce orders -
docs: "The Kafka connector" (kafka.md)"""

KINESIS_PRODUCE = """\
each non-blank line of FILE (or stdin for -) is one JSON value, put as the record's data.
The endpoint: --endpoint, else the local Kinesis of `floeline aws start` when it runs,
else AWS (credentials from the environment). --create makes the stream (--shards 1)
when missing, on a local Kinesis. The partition key: --key-field F, else the line's number.
example: floeline kinesis produce orders orders.jsonl --create --key-field order_id
docs: "The Kinesis connector", section "Local Kinesis and AWS" (kinesis.md)"""

AWS = """\
local AWS endpoints on 127.0.0.1 for quick starts, demos and tests: Kinesis
(kinesis-local, port 4568, $FLOELINE_KINESIS_PORT) and DynamoDB, S3, SQS, Firehose (moto,
port 5000, $FLOELINE_MOTO_PORT); state in ./.floeline/aws ($FLOELINE_AWS_STATE).
docs: "The Kinesis connector", section "Local Kinesis and AWS" (kinesis.md)"""

DEMO = """\
starts the local broker (or Kinesis), produces the spec's ORDERS events, runs the
connector until caught up into --warehouse (./warehouse) and prints the table.
docs: the README's quick starts"""

EPILOGS = {"run": RUN, "validate": VALIDATE, "worker": WORKER, "status": STATUS, "sql": SQL,
           "pipes": PIPES, "submit": SUBMIT, "kafka": KAFKA, "aws": AWS, "demo": DEMO}

# ---------------------------------------------------------------- docs/cli.md

# One or more examples per command (a leaf of the parser); each parses with the parser
# (tests/unit/test_cli_reference.py).
EXAMPLES = {
    "run": ["floeline run orders.properties --until-caught-up", "floeline run orders.json"],
    "worker": ["floeline worker worker.properties", "floeline worker"],
    "submit": ["floeline submit orders.properties --master spark://HOST:7077",
               "floeline submit --worker worker.properties --master spark://HOST:7077 -- --executor-memory 4g",
               "floeline submit orders.properties --master spark://HOST:7077 --print"],
    "validate": ["floeline validate orders.properties"],
    "status": ["floeline status orders.properties --format json",
               "floeline status --worker worker.properties"],
    "sql": ["floeline sql \"SELECT record_metadata:topic, order_id FROM orders\"",
            "floeline sql -f setup.sql --warehouse ./warehouse"],
    "pipes": ["floeline pipes run --until-caught-up"],
    "kafka start": ["floeline kafka start", "floeline kafka start --secure"],
    "kafka stop": ["floeline kafka stop"],
    "kafka status": ["floeline kafka status"],
    "kafka produce": ["floeline kafka produce orders orders.jsonl --key-field order_id --header source=app"],
    "kinesis produce": ["floeline kinesis produce orders orders.jsonl --create --key-field order_id"],
    "aws": ["floeline aws start", "floeline aws status"],
    "setup": ["floeline setup", "floeline setup --tests"],
    "demo": ["floeline demo", "floeline demo kinesis --warehouse /tmp/demo-warehouse"],
    "worker-passwd": ["floeline worker-passwd alice >> users.txt"],
}

REGENERATE = "make docs-cli"


def commands(parser) -> list[tuple[str, object, str]]:
    """(name, parser, one-line help) of every command and sub-command, in the parser's
    order: `kafka` comes before `kafka start`."""
    import argparse

    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                full = sub.prog.split(" ", 1)[1]
                found.append((full, sub, helps.get(name, "")))
                found.extend(commands(sub))
    return found


def leaves(parser) -> list[str]:
    """The commands that run something (no sub-command below them)."""
    import argparse

    return [name for name, sub, _ in commands(parser)
            if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)]


def reference(parser) -> str:
    """docs/cli.md: every command, its usage, arguments and options with their defaults,
    an example, and its --help epilog. Made from the parser itself (`make docs-cli`)."""
    import argparse

    found = commands(parser)
    out = ["# floeline's commands", "",
           "Every command of `floeline`, its arguments and options and an example. Made from the "
           f"command-line parser itself (`{REGENERATE}`); a unit test (tests/unit/test_cli_reference.py) "
           "fails when it and the parser differ. `floeline COMMAND --help` says the same, with the "
           "command's main settings and defaults.", "",
           "| command | what it does |", "| --- | --- |"]
    for name, _, text in found:
        out.append(f"| [`floeline {name}`](#{_anchor('floeline ' + name)}) | {_cell(text)} |")
    for name, sub, text in found:
        out += ["", f"{'#' * (2 + name.count(' '))} floeline {name}", ""][1 if out[-1] == "" else 0:]
        if text:
            out += [text[0].upper() + text[1:] + ("" if text.endswith(".") else "."), ""]
        out += ["```", _usage(sub), "```", ""]
        rows = []
        formatter = sub._get_formatter()
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            names = ", ".join(action.option_strings) if action.option_strings else (action.metavar or action.dest)
            if action.option_strings and action.nargs != 0:
                names += f" {action.metavar or action.dest.upper()}"
            about = formatter._expand_help(action) if action.help else ""
            if action.choices:
                about += ("; " if about else "") + "one of: " + ", ".join(str(c) for c in action.choices)
            default = action.default
            shown = "" if default in (None, False, argparse.SUPPRESS) or \
                (action.nargs == "?" and default == "-" and not action.option_strings) else f"`{default}`"
            rows.append(f"| `{names}` | {shown} | {_cell(about)} |")
        if rows:
            out += ["| argument | default | what it is |", "| --- | --- | --- |", *rows, ""]
        subcommands = [n for n, _, _ in found if n.startswith(name + " ")]
        if subcommands:
            out += ["Its commands: " + ", ".join(f"[`{n}`](#{_anchor('floeline ' + n)})" for n in subcommands)
                    + ".", ""]
        examples = EXAMPLES.get(name, [])
        if examples:
            out += [f"Example{'s' if len(examples) > 1 else ''}:", "", "```", *examples, "```", ""]
        if sub.epilog:
            out += [f"From `floeline {name} --help`:", "", "```", sub.epilog.rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def _usage(parser) -> str:
    formatter = parser.formatter_class(prog=parser.prog, width=10_000)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(title: str) -> str:
    return "-".join(title.lower().split())
