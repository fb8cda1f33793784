"""floeline's dev tooling: the local services the demo, the tests and the benchmarks
run against, each detached from the process that starts it, its state in one
directory:

  kafka.py         the Apache Kafka broker in KRaft mode (`floeline kafka start`)
  kafka_secure.py  the same broker with SASL_SSL: its CA, keystores and SCRAM users
  registry.py      a schema registry (Apicurio, Confluent API) for Avro/Protobuf tests
  aws.py           kinesis-local and moto's server: Kinesis, DynamoDB, S3, SQS, Firehose
  cluster.py       a Spark standalone cluster (tests of `floeline submit`)
  services.py      what they share: launch, stop, ports, the start lock
  produce.py       JSON lines into a topic or a stream (`floeline kafka|kinesis produce`)

The product never imports this package; it sits just below the command line."""
