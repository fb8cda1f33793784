"""The Kinesis source (Kinesis Data Streams), one job per module:

  source.py   KinesisSource: channels (shards), where each starts, the lease table
              mirror, lag; what the connector talks to
  leases.py   the KCL-layout DynamoDB lease table (which process reads which shards)
  reader.py   the PySpark streaming data source `floeline_kinesis` that reads shards
  spec.py     the data source's `spec` option, built by the connector
  offsets.py  the offset in Spark's log and the shard rules (pure)
  client.py   the Kinesis calls, through floeline's one AWS retry rule
  cursor.py   reading one shard between micro-batches
  batches.py  records as read, the per-shard batch limits, the Arrow rows
  replay.py   re-reading a logged batch exactly
  kpl.py      the KPL aggregated-record format"""
