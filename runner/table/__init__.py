"""Import paths of 0.1.0 that user code may hold, kept with a DeprecationWarning."""
