"""Defaults the simulator, the runtime and the policies share, each defined once (`--restart-delay`,
`--interval` and the policies' own settings start from these)."""

from __future__ import annotations

# δ of Pollux's re-allocation factor (§4.2), and what a simulated restart costs a job without a measured restore
# delay of its own: the Pollux artifact's 30 s.
RESTART_DELAY_S = 30
# The Pollux policy's shortest-remaining-first exponent a: a job's term of the power mean weighs (its remaining time
# / the round's median)^(−a) where remaining work is weighed (`pollux.policies.remaining`); measured on Sia's
# Philly and Helios workloads (docs/design.md, "Remaining work").
SRPT_EXPONENT = 2.0
# How many times the most GPUs an adaptive job has run on it may be given (docs/design.md, "Exploration bound"):
# the paper's 2, as every view's `max_gpus` holds it; and the Pollux policy's own where remaining work is weighed
# (`PolluxPolicy.explore`), where a young job's each doubling costs it a restore: measured on Sia's Philly and Helios
# workloads (docs/design.md, "Remaining work").
EXPLORATION_FACTOR = 2
EXPLORATION_FACTOR_REMAINING = 4.0
# Seconds between scheduling rounds when nothing else happens (the artifact's 60 s).
ROUND_INTERVAL_S = 60
# Seconds a job started or moved trains, after its restore delay, before it may be moved again (`pollux.lease`): the
# runtime's default; the simulator's is no lease, as in the paper.
LEASE_MIN_RUN_S = 60.0
# Themis' fairness knob f: each auction is offered to the ⌊(1 − f) · N⌋ jobs furthest behind their finish-time
# fairness, the best-off fraction f left out; the Themis authors' implementation's default.
THEMIS_FAIRNESS_KNOB = 0.2
# Seconds a real job asked to stop (SIGTERM) may take to checkpoint before it is killed.
STOP_GRACE_S = 60.0
# Hour of the Philly trace's day at which a generated workload's submission window starts (`pollux workload
# generate --start-hour`, `pollux.sim.generate`).
GENERATE_START_HOUR = 2
