"""What type a machine's GPUs are, in the short names Pollux's clusters and job specs use ("a100", "t4", "rtx").

Why: a mixed cluster scheduled as if it were uniform wastes its fast GPUs (docs/design.md, "Heterogeneous
clusters"), so the runtime reads each node's GPU type from the machine rather than from the user: the local
backend from `nvidia-smi`, the Ray backend from Ray's `accelerator_type:*` resources or node labels. One
normalisation for both, so the same card gets the same name whichever backend runs it.
"""

from __future__ import annotations

import re

from pollux.errors import SpecError

CPU_SLOT_TYPE = "cpu"  # the type of a CPU slot where no `--gpu-type` names one
UNKNOWN_GPU_TYPE = "gpu"  # a GPU whose type the machine does not tell
_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "amd", "intel"}
TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def type_from_device_name(device: str) -> str:
    """`NVIDIA A100-SXM4-40GB` → `a100`, `Tesla T4` → `t4`, `NVIDIA GeForce RTX 2080 Ti` → `rtx`, Ray's
    accelerator type `A100` → `a100`: the model's first word without the vendor, up to its first dash."""
    words = [w for w in device.lower().replace("_", " ").split() if w not in _VENDOR_WORDS]
    if not words:
        return UNKNOWN_GPU_TYPE
    name = words[0].split("-")[0]
    return name if TYPE_NAME.match(name) else UNKNOWN_GPU_TYPE


def parse_slot_types(values: list[str], slots: int | None) -> list[tuple[str, int | None]]:
    """`--gpu-type` values: `NAME` (every slot is of that type) or `NAME=SLOTS` repeated (one local node of SLOTS
    slots per value, for tests of mixed clusters on CPU slots). `(type, slots or None)` per node."""
    nodes: list[tuple[str, int | None]] = []
    for value in values:
        name, _, count = value.partition("=")
        if not TYPE_NAME.match(name):
            raise SpecError(f"--gpu-type {value!r}: expected NAME or NAME=SLOTS, a name like a100 (lowercase)")
        if count and (not count.isdigit() or int(count) < 1):
            raise SpecError(f"--gpu-type {value!r}: SLOTS must be a whole number >= 1, e.g. {name}=2")
        nodes.append((name, int(count) if count else None))
    if len(nodes) > 1 and any(n is None for _, n in nodes):
        raise SpecError("--gpu-type: with several types give each its slots, e.g. --gpu-type a100=2 --gpu-type rtx=2")
    if len(nodes) > 1 and slots is not None:
        raise SpecError("--slots and --gpu-type NAME=SLOTS both give the slots; use one of them")
    return nodes


def parse_type_resources(values: list[str]) -> dict[str, str]:
    """`--gpu-type-resource RESOURCE=TYPE` values: a node offering RESOURCE has GPUs of TYPE."""
    mapping = {}
    for value in values:
        resource, _, name = value.partition("=")
        if not resource or not TYPE_NAME.match(name):
            raise SpecError(f"--gpu-type-resource {value!r}: expected RESOURCE=TYPE, e.g. pollux_a100=a100")
        mapping[resource] = name
    return mapping
