"""Table services, each an action of its own like Hudi's: compaction, bucket expansion,
clean. Each plans from the Delta log and then executes; called by the CLI's commands and by
a run after its commit, never importing either."""
