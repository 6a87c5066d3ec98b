"""Sources: what each reads this run (plan.py), files, Delta tables, JDBC and
Kafka, checkpoints.

Each source becomes a temporary view under its name for the transform. Nothing is imported
here, so that a module without Spark (listing.py, for `runner validate --against`) loads
without it.
"""
