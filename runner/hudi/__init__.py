"""Apache Hudi's names and files: key generator types and properties, merge payload and
merger class names, and the import of a HoodieStreamer job as a pipeline spec. Nothing here
reads or writes a table; the spec loader and `runner import-hudi` translate through it."""
