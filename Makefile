# floeline's two README commands: `make demo` and `make test`. Both do all the set-up
# (virtualenv from requirements.lock, the local Kafka broker's jars, kinesis-local when node
# and npm are there, Spark's packages); `make test` also the tests' reference peers
# (Kafka Connect's jars with Debezium's connector, PostgreSQL) and requires node for Kinesis.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.floeline-setup
TEST_STAMP := $(VENV)/.floeline-setup-tests

.PHONY: setup test-setup docs-cli demo demo-firehose test test-cluster unit bench bench-cold kafka-start kafka-stop aws-start aws-stop clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@command -v java >/dev/null && command -v javac >/dev/null || { echo "floeline needs Java 17 (a JDK with javac): apt-get install openjdk-17-jdk-headless" >&2; exit 1; }
	@command -v mvn >/dev/null || { echo "floeline's set-up fetches the Kafka broker with Maven: apt-get install maven" >&2; exit 1; }
	@command -v $(PYTHON) >/dev/null || { echo "floeline needs Python 3.11 ($(PYTHON) not found)" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/floeline setup
	touch $(STAMP)

# The tests' pieces: the reference peers, and kinesis-local (the Kinesis tests run it on node).
test-setup: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "the tests run the local Kinesis (kinesis-local, installed with npm) on node: apt-get install nodejs npm" >&2; exit 1; }
	$(BIN)/floeline setup --tests
	touch $(TEST_STAMP)

demo: setup
	$(BIN)/floeline demo

demo-firehose: setup
	$(BIN)/floeline demo firehose

# The class archive's line makes Spark's class archive again when a jar on the driver's
# class path changed since set-up (a no-op otherwise): every Spark start of the suite takes it.
test: test-setup
	$(BIN)/python -c "from floeline.cli import report_class_archive; report_class_archive()"
	$(BIN)/pytest -q tests

# The opt-in tests on a local Spark standalone cluster (one master, two workers of 1 core):
# floeline submit, the worker on the cluster with an S3 warehouse, the loss of an executor host.
test-cluster: test-setup
	FLOELINE_CLUSTER_TESTS=1 $(BIN)/pytest -q tests/integration/test_cluster.py tests/integration/test_cluster_worker.py

unit: setup
	$(BIN)/pytest -q tests/unit

bench: setup
	$(BIN)/python bench/bench_ingest.py

bench-cold: setup
	$(BIN)/pip install -q -r bench/requirements.txt
	$(BIN)/python bench/bench_cold.py

kafka-start: setup
	$(BIN)/floeline kafka start

kafka-stop:
	$(BIN)/floeline kafka stop

aws-start: setup
	$(BIN)/floeline aws start

aws-stop:
	$(BIN)/floeline aws stop

# docs/cli.md from the command-line parser (tests/unit/test_cli_reference.py checks it)
docs-cli:
	$(BIN)/python -c "from floeline.cli import build_parser; from floeline.command_help import reference; print(reference(build_parser()), end='')" > docs/cli.md

clean:
	rm -rf warehouse .floeline
