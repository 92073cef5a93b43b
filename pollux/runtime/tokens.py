"""Tenants' tokens: `pollux tenant add NAME` makes one, prints it once, and the state database keeps only its sha256.

A token is 32 random bytes from `secrets` (256 bits), so its plain sha256 is as strong as a salted, stretched hash:
salts and slow hashes defend low-entropy passwords against dictionaries, and no dictionary holds a random 256-bit
string. A leaked database therefore yields no usable token. A tenant holds one token at a time: `add` again replaces
it (rotation), `revoke` drops it. Lookups compare digests in constant time.

The table (`tenant_tokens`, schema version 3) lives in the state database beside the jobs, written here through a
connection of its own: `pollux tenant add` works on a state directory whether or not a service runs on it, and the
API's reads never wait on the scheduler's store lock.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from pollux.runtime.migrations import migrate

TOKEN_BYTES = 32


@dataclass(frozen=True)
class Enrolled:
    """A tenant that holds a token (never the token or its digest)."""

    tenant: str
    created_at: float


def token_digest(token: str) -> str:
    """What the database keeps of a token (and what a session remembers of the token that opened it)."""
    return hashlib.sha256(token.encode()).hexdigest()


class TenantTokens:
    """The tenants' token digests in the state database at `path`. Safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        migrate(self._db, path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def issue(self, tenant: str, now: float) -> str:
        """A new token for `tenant`, replacing any it had; the caller shows it once, nothing keeps it."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        with self._lock:
            self._db.execute(
                "INSERT INTO tenant_tokens VALUES (?, ?, ?) ON CONFLICT(tenant) DO UPDATE SET "
                "token_sha256 = excluded.token_sha256, created_at = excluded.created_at",
                (tenant, token_digest(token), now),
            )
        return token

    def revoke(self, tenant: str) -> bool:
        """Drop `tenant`'s token (its requests get 401 from now on); False if it had none."""
        with self._lock:
            return self._db.execute("DELETE FROM tenant_tokens WHERE tenant = ?", (tenant,)).rowcount > 0

    def enrolled(self) -> list[Enrolled]:
        """Every tenant holding a token, by name."""
        with self._lock:
            rows = self._db.execute("SELECT tenant, created_at FROM tenant_tokens ORDER BY tenant").fetchall()
        return [Enrolled(tenant, created_at) for tenant, created_at in rows]

    def tenant_of(self, digest: str) -> str | None:
        """The tenant whose token has this digest, else None; every stored digest is compared, in constant time."""
        with self._lock:
            rows = self._db.execute("SELECT tenant, token_sha256 FROM tenant_tokens").fetchall()
        found = None
        for tenant, stored in rows:
            if hmac.compare_digest(digest.encode(), stored.encode()):
                found = tenant
        return found
