"""Pollux: co-adaptive, goodput-optimized scheduling of deep-learning training jobs (OSDI'21)."""

import os

# Pollux's numerics are many small matrices (fits, interpolation simplices), where a multi-threaded BLAS only
# adds hand-off and spin-wait costs, and it competes with our own worker processes: up to 20× slower on 2 cores.
# A default only; it takes effect when pollux is imported before numpy, and a user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
