"""One run of a pipeline, as stages: preflight on the snapshot, source plans, the keyed and
judged batch, the bucket plan, the written files, the commit, the services after it."""
