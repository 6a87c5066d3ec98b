"""What the CLI's commands do beyond a run or a table service: read, inspect, keys, the
continuous loop. Each takes the spec (or a table) and returns data for the CLI to print."""
