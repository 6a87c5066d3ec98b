"""The table actions, each a module of its own like Hudi's: compaction, bucket expansion
and hot splits, clean, restore, schema rewrite. Each plans from the Delta log and then
executes inside a `TableChange` (table_change.py), which carries out every change of a
table the same way; called by the CLI's commands and by a run, never importing either."""
