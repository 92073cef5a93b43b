"""Pollux: co-adaptive, goodput-optimized scheduling of deep-learning training jobs (OSDI'21)."""

__version__ = "0.1.0"
