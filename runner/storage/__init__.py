"""Files under a table, below any Delta notion: where they live (local or S3), the parquet
files every writer writes, the meta columns they start with, and the writers-in-flight
heartbeats."""
