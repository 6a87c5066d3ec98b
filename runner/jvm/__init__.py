"""Starting and feeding the JVM: jar downloads from Maven Central (`maven`), the connector
jars a spec's sources and storage need (`spark_connectors`, `s3_connector`), the one
SparkSession (`session`), Java's class-data archive and the warm-up that runs while Spark
starts (`java_cds`, `java_warmup`), and the Python worker daemon Spark's executors fork
(`worker_daemon`)."""
