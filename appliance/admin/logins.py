"""Logins: an opaque cookie token per login, with a CSRF token bound to it.

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
class Login:
    username: str
    role: Role
    csrf_token: str
    created_at: float
    expires_at: float  # wall time
    grant: str = ""  # the account as it was at login (UserDirectory.grant): a change ends the login

    def csrf_matches(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf_token.encode())


def _digest(token: str) -> str:
    # Only digests are kept, so a memory dump does not hand out live cookies.
    return hashlib.sha256(token.encode()).hexdigest()


class LoginStore:
    def __init__(
        self, ttl_s: float, *, max_logins: int = 256, clock: Callable[[], float] = time.time
    ) -> None:
        self.ttl_s = ttl_s
        self.max_logins = max_logins
        self._clock = clock
        self._logins: dict[str, Login] = {}
        self._lock = threading.Lock()

    def create(self, username: str, role: Role, grant: str = "") -> tuple[str, Login]:
        """A new login; returns the cookie token (shown once) and the login."""
        token = secrets.token_urlsafe(32)
        now = self._clock()
        login = Login(
            username=username,
            role=role,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + self.ttl_s,
            grant=grant,
        )
        with self._lock:
            self._drop_expired(now)
            if len(self._logins) >= self.max_logins:
                oldest = min(self._logins, key=lambda k: self._logins[k].created_at)
                del self._logins[oldest]
            self._logins[_digest(token)] = login
        return token, login

    def get(self, token: str | None) -> Login | None:
        if not token:
            return None
        key = _digest(token)
        with self._lock:
            login = self._logins.get(key)
            if login is None:
                return None
            if login.expires_at <= self._clock():
                del self._logins[key]
                return None
            return login

    def delete(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._logins.pop(_digest(token), None)

    def delete_user(self, username: str) -> None:
        with self._lock:
            for key in [k for k, s in self._logins.items() if s.username == username]:
                del self._logins[key]

    def _drop_expired(self, now: float) -> None:
        for key in [k for k, s in self._logins.items() if s.expires_at <= now]:
            del self._logins[key]
