"""The simulator: job models (measured profiles | parametric catalog), workloads, the virtual-clock backend, metrics.

A `JobModel` (`pollux.sim.jobmodel`) answers what a real job would: how long a step takes on a placement, what
gradient statistics it shows at a batch size and epoch, and how much progress completes each epoch.
`pollux.sim.measured` reproduces the OSDI'21 artifact's profiles; `pollux.sim.parametric` describes job types by
numbers alone (`catalog.toml`), for when no profile exists.
"""
