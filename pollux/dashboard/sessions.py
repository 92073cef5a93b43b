"""Who may see the dashboard: one-time login links and browser sessions, both in the service's memory.

A browser cannot send `Authorization: Bearer`, so it trades the token for a session cookie once: through the login
form (the token typed or pasted, POSTed, never in a URL), or through a one-time link that `pollux dashboard` asks
the API for with the token (the link's code is not the token, works once, and expires in two minutes). Sessions
die with the service, as the token does (it is rotated at every `pollux up`).
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
        self._codes: dict[str, float] = {}
        self._sessions: dict[str, float] = {}

    def new_code(self) -> str:
        """A code for one login link."""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._drop_expired(self._codes)
            self._codes[code] = self._clock() + LINK_TTL_S
        return code

    def redeem(self, code: str) -> str | None:
        """A new session for a valid code (which is spent), else None."""
        with self._lock:
            expires = self._codes.pop(code, None) if code else None
        if expires is None or expires < self._clock():
            return None
        return self.open()

    def open(self) -> str:
        """A new session (after the token was shown)."""
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._drop_expired(self._sessions)
            if len(self._sessions) >= MAX_SESSIONS:
                self._sessions.pop(min(self._sessions, key=self._sessions.__getitem__))
            self._sessions[session] = self._clock() + SESSION_TTL_S
        return session

    def valid(self, session: str) -> bool:
        """Whether `session` is a live session (compared in constant time, as the token is)."""
        if not session:
            return False
        now = self._clock()
        with self._lock:
            live = [s for s, expires in self._sessions.items() if expires >= now]
        return any(hmac.compare_digest(session.encode(), s.encode()) for s in live)

    def _drop_expired(self, table: dict[str, float]) -> None:
        now = self._clock()
        for key in [k for k, expires in table.items() if expires < now]:
            del table[key]
