"""What the CLI's commands do beyond a run or a table service: read, inspect, keys, the
continuous loop, import-hudi, the --summary-json file. Each takes the spec (or a table, or
a command line) and returns data for the CLI (runner/cli) to print."""
