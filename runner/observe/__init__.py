"""What a run leaves for the people who operate it: its record in the run history, Prometheus
metrics, OpenLineage events, progress."""
