"""Writing buckets: the executor and driver writers of a run, a bulk load, a compaction and a
regroup, the merge rules they apply (precombine, payloads and field merges, change-feed
events, tombstones), and the removal of a failed write's files."""
