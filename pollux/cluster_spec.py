"""Clusters by name or by file: the artifacts' clusters as presets, any other as a small TOML file.

A cluster file lists node groups, one `[[group]]` table per kind of node (docs/design.md, "Heterogeneous
clusters: the cluster model"):

    [[group]]
    gpu_type = "rtx"       # a known GPU type (`GPU_TYPES`)
    num_nodes = 3
    gpus_per_node = 8

A preset or file followed by `:Kx` is that cluster with K times the nodes of every group: `sia-heterogeneous:32x`
is the Sia paper's 2,048-GPU cluster of Figure 9 (its `scale_32x` workloads were made for it).

Reading stays here, out of `pollux.cluster` (pure data, no I/O). A bad file is refused with one line naming the
file, the group and the field, and what to write instead (`SpecError`), never with a traceback.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from pollux.cluster import DEFAULT_GPU_TYPE, Cluster, NodeGroup
from pollux.errors import SpecError


@dataclass(frozen=True)
class GpuType:
    """A GPU type the profiles name (Sia's suffixes), and the hardware it was measured on."""

    name: str
    hardware: str


GPU_TYPES: Mapping[str, GpuType] = {
    t.name: t
    for t in (
        GpuType(DEFAULT_GPU_TYPE, "NVIDIA T4"),
        GpuType("rtx", "NVIDIA RTX 2080 Ti"),
        GpuType("dgx-ext", "NVIDIA A100 40 GB"),
        GpuType("dgx", "NVIDIA A100 40 GB (fewer profiled batch sizes than dgx-ext)"),
        GpuType("quad", "NVIDIA Quadro RTX 6000"),
        GpuType("azure", "NVIDIA V100"),
    )
}

# The Pollux artifact's cluster and the Sia artifact's three settings (docs/design.md, "Heterogeneous clusters").
PRESETS: Mapping[str, Cluster] = {
    "pollux-artifact": Cluster(16, 4, DEFAULT_GPU_TYPE),
    "sia-homogeneous": Cluster(16, 4, DEFAULT_GPU_TYPE),
    "sia-heterogeneous": Cluster.of_groups(
        [NodeGroup(DEFAULT_GPU_TYPE, 6, 4), NodeGroup("rtx", 3, 8), NodeGroup("dgx-ext", 2, 8)]
    ),
    "sia-physical": Cluster.of_groups([NodeGroup("rtx", 3, 8), NodeGroup("dgx-ext", 2, 8), NodeGroup("quad", 1, 4)]),
}
DEFAULT_PRESET = "pollux-artifact"

SCALE_SUFFIX = re.compile(r"^(?P<base>.+):(?P<factor>[^:]*)$")  # `NAME:Kx`: K times every group's nodes

GROUP_FIELDS = ("gpu_type", "num_nodes", "gpus_per_node")
FORMAT_HINT = "a cluster file holds [[group]] tables of gpu_type, num_nodes and gpus_per_node"


def load_cluster(name_or_path: str, known_types: Collection[str] | None = None) -> Cluster:
    """The preset of that name, else the cluster file at that path; either followed by `:Kx`, scaled K times.

    `known_types`: the GPU types the caller can run (the simulator passes those its job models have profiles
    for); by default every type of `GPU_TYPES`. A preset or file using another type is refused."""
    scaled = SCALE_SUFFIX.match(name_or_path)
    if scaled and name_or_path not in PRESETS and not Path(name_or_path).is_file():
        return load_cluster(scaled["base"], known_types).scaled(_scale_factor(name_or_path, scaled["factor"]))
    known = frozenset(GPU_TYPES if known_types is None else known_types)
    if name_or_path in PRESETS:
        cluster = PRESETS[name_or_path]
        missing = [t for t in cluster.gpu_types if t not in known]
        if missing:
            raise SpecError(
                f"cluster preset {name_or_path!r} uses GPU type {missing[0]!r}, which is not known here "
                f"(known: {', '.join(sorted(known))}); choose another preset or a cluster file"
            )
        return cluster
    path = Path(name_or_path)
    if not path.is_file():
        raise SpecError(
            f"cluster {name_or_path!r} is neither a preset ({', '.join(PRESETS)}) nor a file; "
            f"name a preset or the path of a TOML file ({FORMAT_HINT})"
        )
    return read_cluster_file(path, known)


def _scale_factor(name: str, text: str) -> int:
    """K of a `:Kx` suffix, a whole number >= 1."""
    digits = text.removesuffix("x")
    if not text.endswith("x") or not digits.isdigit() or int(digits) < 1:
        raise SpecError(
            f"cluster {name!r}: the scale after ':' must be a whole number >= 1 followed by x, got {text!r}; "
            "e.g. sia-heterogeneous:32x for 32 times its nodes"
        )
    return int(digits)


def read_cluster_file(path: Path, known_types: Collection[str] | None = None) -> Cluster:
    """The cluster a TOML file describes (module docstring); `SpecError` naming the file and field otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{path}: cannot read the cluster file ({error}); pass a readable TOML file") from None
    return parse_cluster(text, str(path), known_types)


def parse_cluster(text: str, source: str, known_types: Collection[str] | None = None) -> Cluster:
    """The cluster described by TOML `text`; `source` names it in errors."""
    known = frozenset(GPU_TYPES if known_types is None else known_types)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{source}: not valid TOML ({error}); {FORMAT_HINT}") from None
    unknown = [key for key in document if key != "group"]
    if unknown:
        raise SpecError(f"{source}: unknown key {unknown[0]!r}; {FORMAT_HINT}")
    groups = document.get("group")
    if groups is None or groups == []:
        raise SpecError(f"{source}: no [[group]] table; add one per kind of node ({FORMAT_HINT})")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise SpecError(f"{source}: 'group' must be tables written [[group]]; {FORMAT_HINT}")
    return Cluster.of_groups([_group(g, f"{source}: group {i}", known) for i, g in enumerate(groups, start=1)])


def _group(table: Mapping[str, object], where: str, known: frozenset[str]) -> NodeGroup:
    """One `[[group]]` table as a `NodeGroup`; `where` names it in errors (file and group number)."""
    extra = [key for key in table if key not in GROUP_FIELDS]
    if extra:
        raise SpecError(f"{where}: unknown key {extra[0]!r}; a group has only {', '.join(GROUP_FIELDS)}")
    missing = [key for key in GROUP_FIELDS if key not in table]
    if missing:
        example = {"gpu_type": '"aws"', "num_nodes": "4", "gpus_per_node": "8"}[missing[0]]
        raise SpecError(f"{where}: missing {missing[0]}; add e.g. {missing[0]} = {example}")
    gpu_type = table["gpu_type"]
    if not isinstance(gpu_type, str):
        raise SpecError(f'{where}: gpu_type must be a quoted name, got {gpu_type!r}; e.g. gpu_type = "aws"')
    if gpu_type not in known:
        raise SpecError(f"{where}: unknown gpu_type {gpu_type!r}; known: {', '.join(sorted(known))}")
    counts = {}
    for key in ("num_nodes", "gpus_per_node"):
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: {key} must be a whole number, got {value!r}; e.g. {key} = 4")
        if value < 1:
            raise SpecError(f"{where}: {key} must be >= 1, got {value}; leave out a group without nodes or GPUs")
        counts[key] = value
    return NodeGroup(gpu_type, counts["num_nodes"], counts["gpus_per_node"])
