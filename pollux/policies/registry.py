"""Registry of policies by name, imported lazily so `--policy fifo` loads nothing heavy."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from pollux.errors import SpecError
from pollux.policies.base import Policy

POLICIES: dict[str, str] = {
    "fifo": "pollux.policies.fifo:FifoPolicy",
    "tiresias": "pollux.policies.tiresias:TiresiasPolicy",
    "tiresias-gittins": "pollux.policies.tiresias:TiresiasGittinsPolicy",
    "optimus": "pollux.policies.optimus:OptimusPolicy",
    "pollux": "pollux.policies.pollux:PolluxPolicy",
    "elastic-dp": "pollux.policies.elastic_dp:ElasticDPPolicy",
}


def available_policies() -> list[str]:
    """Registered policy names whose module exists in this installation."""
    return [name for name, target in POLICIES.items() if importlib.util.find_spec(target.split(":")[0])]


def policy_class(name: str) -> type[Policy]:
    """The class registered as `name`, imported on first use."""
    if name not in POLICIES:
        raise SpecError(f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}")
    module_name, class_name = POLICIES[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_policy(name: str, **options: Any) -> Policy:
    """Build the policy registered as `name` with its keyword `options`."""
    return policy_class(name)(**options)
