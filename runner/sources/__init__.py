"""Sources: what each reads this run (plan.py), the source kinds behind one interface
(kinds/: files, Delta tables, JDBC, Kafka, each calling the modules here that do its work),
checkpoints.

Each source becomes a temporary view under its name for the transform. Nothing is imported
here, so that a module without Spark (listing.py, the kinds' registry, for `runner
validate --against` and `runner render`) loads without it.
"""
