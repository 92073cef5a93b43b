"""Registry of policies by name, imported lazily so `--policy fifo` loads nothing heavy, and the one factory that
builds them for the simulator, the runtime and the benchmarks alike.

`make_policy(name, settings, inputs)`: `settings` carry what a user sets on a command line (the restart delay δ,
the power-mean p, interference avoidance, whether a waiting job's start is discounted, Themis' fairness knob); each
policy takes the ones it declares (`Policy.settings`), so a flag reaches every policy that has the knob. `inputs`
carry knowledge only some callers have (true step times in the simulator); a policy takes those it declares
(`Policy.inputs`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from pollux.defaults import EXPLORATION_FACTOR_REMAINING, RESTART_DELAY_S, SRPT_EXPONENT, THEMIS_FAIRNESS_KNOB
from pollux.errors import SpecError
from pollux.policies.base import Policy

POLICIES: dict[str, str] = {
    "fifo": "pollux.policies.fifo:FifoPolicy",
    "tiresias": "pollux.policies.tiresias:TiresiasPolicy",
    "tiresias-gittins": "pollux.policies.tiresias:TiresiasGittinsPolicy",
    "optimus": "pollux.policies.optimus:OptimusPolicy",
    "pollux": "pollux.policies.pollux:PolluxPolicy",
    "elastic-dp": "pollux.policies.elastic_dp:ElasticDPPolicy",
    "gavel": "pollux.policies.gavel:GavelPolicy",
    "pollux-unaware": "pollux.policies.pollux_unaware:PolluxUnawarePolicy",
    "astraea": "pollux.policies.astraea:AstraeaPolicy",
    "themis": "pollux.policies.themis:ThemisPolicy",
    "shockwave": "pollux.policies.shockwave:ShockwavePolicy",
}


def policy_class(name: str) -> type[Policy]:
    """The class registered as `name`, imported on first use."""
    if name not in POLICIES:
        raise SpecError(f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}")
    module_name, class_name = POLICIES[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


@dataclass(frozen=True)
class PolicySettings:
    """The knobs of the policies that have them (see each policy's `settings`)."""

    restart_delay_s: float = float(RESTART_DELAY_S)  # δ of Pollux's re-allocation factor (§4.2)
    p: float = -1.0  # power-mean exponent: −1 fair, 1 throughput
    avoid_interference: bool = True  # never two distributed jobs on one node
    discount_starts: bool = True  # the artifact's factor on a waiting job's start too (the runtime turns it off)
    fairness_knob: float = THEMIS_FAIRNESS_KNOB  # Themis' f: the share of best-off jobs left out of each auction
    # Pollux: weigh each job's remaining work (`pollux.policies.remaining`): its term of the power mean by its
    # remaining time ^ −srpt, and a restart against the time it has left; None: on clusters of several GPU types.
    remaining_work: bool | None = None
    srpt: float = SRPT_EXPONENT
    # Pollux, where remaining work is weighed: an adaptive job may grow to this many times the GPUs it has run on.
    explore: float = EXPLORATION_FACTOR_REMAINING


Input = Callable[[], object]  # built only if the policy takes it (reading a trace is not free)


def make_policy(name: str, settings: PolicySettings | None = None, inputs: Mapping[str, Input] | None = None) -> Policy:
    """The policy registered as `name`, given the `settings` it declares and the `inputs` it declares and the caller
    has. An input a policy cannot work without is named in a `SpecError` when the caller lacks it."""
    cls = policy_class(name)
    settings = settings or PolicySettings()
    inputs = inputs or {}
    known = {f.name for f in fields(PolicySettings)}
    options: dict[str, object] = {key: getattr(settings, key) for key in cls.settings if key in known}
    options |= {key: inputs[key]() for key in cls.inputs if key in inputs}
    try:
        return cls(**options)
    except TypeError as error:  # a required input the caller does not have
        raise SpecError(
            f"policy {name!r} needs {', '.join(k for k in cls.inputs if k not in inputs)}, which this setting "
            f"cannot provide ({error})"
        ) from None
