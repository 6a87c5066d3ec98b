"""Delta table access: settings, snapshot and file selection, executor-side writer, commit."""
