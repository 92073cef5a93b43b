"""One error hierarchy: every message says what is wrong, where, and how to fix it.

The CLI prints a `PolluxError` as one line and exits 2; anything else is a bug and keeps its traceback.
"""


class PolluxError(Exception):
    """Base of every error caused by input or environment (not by a bug)."""


class DataNotFoundError(PolluxError):
    """The artifact's data files are nowhere to be found (and could not be fetched)."""


class DataIntegrityError(PolluxError):
    """A data file exists but does not match its sha256 in the manifest."""


class ProfileError(PolluxError):
    """A job profile file is missing, malformed, or holds an impossible value."""


class SpecError(PolluxError):
    """A job or cluster specification is invalid."""


class TraceError(PolluxError):
    """A workload trace row is malformed."""


class CatalogError(SpecError):
    """A parametric job catalog (TOML) is unreadable or has a bad entry; the message names file, type and field."""
