"""The services every worker test module shares: one Kafka broker, the run's Spark
session and one set of local AWS services for all of tests/worker (the integration
suite's fixtures, tests/integration/conftest.py, defined once here).

A fixture defined in a test module is a fixture of that module only, its session scope
notwithstanding: while each module imported kafka, spark and aws from worker_services,
each started a broker (and local AWS) of its own, kept running to the end of the run.
worker_services now hands the modules these ones (see its kafka, spark and aws)."""

from __future__ import annotations

from worker_services import _integration

kafka = _integration.kafka
spark = _integration.spark
aws = _integration.aws
