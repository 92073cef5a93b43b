"""Who may see the dashboard: one-time login links and browser sessions, both in the service's memory.

A browser cannot send `Authorization: Bearer`, so it trades the token for a session cookie once: through the login
form (the token typed or pasted, POSTed, never in a URL), or through a one-time link that `pollux dashboard` asks
the API for with the token (the link's code is not the token, works once, and expires in two minutes). Sessions
die with the service, as the token does (it is rotated at every `pollux up`).

Each code and session remembers who proved itself (`who`: an opaque string the server gives, the digest of the token
shown), so a tenant's session sees what its token sees, and dies when that token is revoked or replaced.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable

LINK_TTL_S = 120.0
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 256  # a client that logs in in a loop cannot grow the table without bound


class Sessions:
    """One-time codes and session ids, each with its expiry on the monotonic clock. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._codes: dict[str, tuple[float, str]] = {}  # code -> (expiry, who)
        self._sessions: dict[str, tuple[float, str]] = {}  # session -> (expiry, who)

    def new_code(self, who: str = "") -> str:
        """A code for one login link, for `who`."""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._drop_expired(self._codes)
            self._codes[code] = (self._clock() + LINK_TTL_S, who)
        return code

    def redeem(self, code: str) -> str | None:
        """A new session for a valid code (which is spent), else None."""
        with self._lock:
            entry = self._codes.pop(code, None) if code else None
        if entry is None or entry[0] < self._clock():
            return None
        return self.open(entry[1])

    def open(self, who: str = "") -> str:
        """A new session for `who` (after its token was shown)."""
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._drop_expired(self._sessions)
            if len(self._sessions) >= MAX_SESSIONS:
                self._sessions.pop(min(self._sessions, key=lambda s: self._sessions[s][0]))
            self._sessions[session] = (self._clock() + SESSION_TTL_S, who)
        return session

    def who(self, session: str) -> str | None:
        """Who opened `session` if it is live, else None (compared in constant time, as the token is)."""
        if not session:
            return None
        now = self._clock()
        with self._lock:
            live = [(s, who) for s, (expires, who) in self._sessions.items() if expires >= now]
        found = None
        for known, who in live:
            if hmac.compare_digest(session.encode(), known.encode()):
                found = who
        return found

    def valid(self, session: str) -> bool:
        """Whether `session` is a live session."""
        return self.who(session) is not None

    def _drop_expired(self, table: dict[str, tuple[float, str]]) -> None:
        now = self._clock()
        for key in [k for k, (expires, _) in table.items() if expires < now]:
            del table[key]
