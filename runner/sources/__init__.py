"""Sources: what each reads this run (plan.py), files, Delta tables, JDBC and
Kafka, checkpoints.

Each source becomes a temporary view under its name for the transform.
"""

from runner.sources.model import SourcePlan
from runner.sources.plan import nothing_new, plan_live_reads, plan_sources, read_input

__all__ = ["SourcePlan", "nothing_new", "plan_live_reads", "plan_sources", "read_input"]
