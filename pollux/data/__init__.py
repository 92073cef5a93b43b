"""The artifacts' data (Pollux OSDI'21, `pollux-osdi21`; Sia SOSP'23, `sia-sosp23`): find it, get it, check it,
read it.

Only code and the sha256 manifests live here; the data files themselves are found at run time (docs/design.md,
Data). Every function takes the artifact (default `pollux-osdi21`).
- `pollux.data.locate.find_data_dir`: where the data is, and which rule found it.
- `pollux.data.fetch.fetch`: download it into the user cache, every file checked against the manifest.
- `pollux.data.verify.verify`: check a folder against the manifest.
- `pollux.data.profiles.load_profile`: one model's measured profile (on one GPU type), typed;
  `load_typed_profiles`: one per GPU type it was profiled on.
`fetch` and `verify` are not re-exported here: a package attribute named like its submodule shadows the module,
and reading profiles should not load the HTTP stack. The profile names are imported on first use: importing any
`pollux.data.*` module (`pollux data --help`, `locate` for the simulator's options) must not load numpy.
"""

from typing import TYPE_CHECKING, Any

from pollux.data.locate import ARTIFACTS, Artifact, DataLocation, default_cache_dir, find_data_dir

if TYPE_CHECKING:
    from pollux.data.profiles import MODELS, JobProfile, available_models, load_profile, load_typed_profiles

_PROFILE_NAMES = frozenset({"MODELS", "JobProfile", "available_models", "load_profile", "load_typed_profiles"})


def __getattr__(name: str) -> Any:
    """`pollux.data.load_profile` and the other profile names, imported when first asked for (PEP 562)."""
    if name in _PROFILE_NAMES:
        from pollux.data import profiles

        return getattr(profiles, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARTIFACTS",
    "MODELS",
    "Artifact",
    "DataLocation",
    "JobProfile",
    "available_models",
    "default_cache_dir",
    "find_data_dir",
    "load_profile",
    "load_typed_profiles",
]
