"""What the CLI's commands do: run, expand, clean, inspect, read, keys. Each takes the spec
(or a table) and returns data for the CLI to print; the stages they use live in runner.ops."""
