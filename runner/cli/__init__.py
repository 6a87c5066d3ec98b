"""The `runner` command. Each command parses and prints; the library does the work.

Exit codes: 0 success, 2 a problem the user can fix (spec, arguments, input), 1 a failure.

main.py holds the group and turns errors into exit codes; the commands are grouped by what
they act on: pipeline_commands.py (validate, run, keys, schema, import-hudi),
table_commands.py (expand, plan, clean, compact, read, inspect), deploy_commands.py
(render, fetch-jars, the pods' driver and executor). options.py turns a command's many
options into one frozen value. Every command imports what it uses inside its body, so
`runner --help` stays fast and `runner validate` imports no pyspark.
"""

from runner.cli.main import cli, main

__all__ = ["cli", "main"]
