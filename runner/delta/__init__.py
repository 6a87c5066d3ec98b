"""The Delta table: snapshot and log replay, deletion vectors, the stored settings and schema,
the log entries the runner writes, and the commit of every writer. Reads of the table's rows
(with Spark or pyarrow) sit here too, since they depend on what the log says is live."""
