"""Login sessions: an opaque cookie token per login, with a CSRF token bound to it.

Sessions live in memory: a daemon restart logs everyone out, which is fine for a device page.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.admin.schemas import Role


@dataclass(frozen=True)
class LoginSession:
    username: str
    role: Role
    csrf_token: str
    created_at: float
    expires_at: float  # wall time
    grant: str = ""  # the account as it was at login (UserDirectory.grant): a change ends the session

    def csrf_matches(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf_token.encode())


def _digest(token: str) -> str:
    # Only digests are kept, so a memory dump does not hand out live cookies.
    return hashlib.sha256(token.encode()).hexdigest()


class SessionStore:
    def __init__(
        self, ttl_s: float, *, max_sessions: int = 256, clock: Callable[[], float] = time.time
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: dict[str, LoginSession] = {}
        self._lock = threading.Lock()

    def create(self, username: str, role: Role, grant: str = "") -> tuple[str, LoginSession]:
        """A new session; returns the cookie token (shown once) and the session."""
        token = secrets.token_urlsafe(32)
        now = self._clock()
        session = LoginSession(
            username=username,
            role=role,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + self.ttl_s,
            grant=grant,
        )
        with self._lock:
            self._drop_expired(now)
            if len(self._sessions) >= self.max_sessions:
                oldest = min(self._sessions, key=lambda k: self._sessions[k].created_at)
                del self._sessions[oldest]
            self._sessions[_digest(token)] = session
        return token, session

    def get(self, token: str | None) -> LoginSession | None:
        if not token:
            return None
        key = _digest(token)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if session.expires_at <= self._clock():
                del self._sessions[key]
                return None
            return session

    def delete(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._sessions.pop(_digest(token), None)

    def delete_user(self, username: str) -> None:
        with self._lock:
            for key in [k for k, s in self._sessions.items() if s.username == username]:
                del self._sessions[key]

    def _drop_expired(self, now: float) -> None:
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]
