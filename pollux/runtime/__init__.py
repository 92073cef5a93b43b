"""The real runtime: job specs, durable state, the scheduler service and its backends (local processes, Ray)."""
