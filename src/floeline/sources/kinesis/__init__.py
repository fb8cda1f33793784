"""The Kinesis source (Kinesis Data Streams): source.py, the Spark data source
reader.py, the lease table leases.py and the KPL format kpl.py."""
