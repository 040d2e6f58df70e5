"""[admin]: where the admin page listens, its accounts and logins, /metrics access and its limits."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, field_validator, model_validator

from engines.params import Params, check_ip_address


class AdminParams(Params):
    """The admin page: where it listens, its accounts and logins, /metrics access and its limits."""

    enabled: bool = Field(False, description="serve the admin page")
    bind_host: str = Field(
        "127.0.0.1", description="the interface the admin page listens on (0.0.0.0: every interface)"
    )
    port: int = Field(8080, ge=1, le=65535, description="the admin page's TCP port")
    users_file: Path = Field(
        Path("/var/lib/appliance/admin-users"),
        description="the admin page's accounts, made with `appliance admin passwd`",
    )
    password_file: Path = Field(
        Path("/var/lib/appliance/admin-password"), description="the provisioned password of user 'admin'"
    )
    session_ttl_s: float = Field(28800.0, ge=60.0, le=604800.0, description="login lifetime")
    login_max_failures: int = Field(
        5, ge=1, le=1000, description="failed logins allowed per client address and per user name"
    )
    login_window_s: float = Field(
        300.0, ge=1.0, le=86400.0, description="the window login_max_failures counts in"
    )
    cookie_secure: bool = Field(
        False,
        description="send the cookie over HTTPS only (behind a TLS proxy; always so when TLS is on here)",
    )
    tls_cert_file: Path | None = Field(
        None,
        description="the site's certificate for the page (PEM, with its chain); unset: on a LAN address the "
        "device's own, made in tls_dir",
    )
    tls_key_file: Path | None = Field(None, description="... and its private key (PEM)")
    tls_dir: Path = Field(
        Path("/var/lib/appliance/tls"),
        description="where the device's certificate is made once and kept (its fingerprint: appliance doctor)",
    )
    allow_plain_http: bool = Field(
        False,
        description="serve a LAN address over plain HTTP (passwords cross the network readable); loopback "
        "is always plain",
    )
    metrics_public: bool = Field(False, description="serve /metrics without a login (for a scraper)")
    metrics_token_file: Path | None = Field(
        None,
        description="a file holding a token (16+ characters) a scraper sends as 'Authorization: Bearer "
        "TOKEN' to read /metrics without a login (Prometheus: authorization.credentials_file)",
    )
    request_timeout_s: float = Field(
        10.0,
        gt=0.0,
        le=300.0,
        validation_alias=AliasChoices("request_timeout_s", "header_timeout_s"),  # its name until 2026-12
        description="a request, header fields and body, must arrive within this, or the connection closes",
    )
    max_connections: int = Field(64, ge=4, le=4096, description="more connections at once get 503")
    max_connections_per_client: int = Field(
        8,
        ge=1,
        le=4096,
        description="connections one address may hold at once (a trusted proxy excepted); more are closed",
    )
    trusted_proxies: tuple[str, ...] = Field(
        (),
        description="addresses of a TLS proxy in front whose X-Forwarded-For is believed; "
        "none by default, so a forged header cannot dodge the login limit",
    )
    refresh_s: float = Field(2.0, ge=0.5, le=60.0, description="dashboard refresh interval")

    @field_validator("bind_host")
    @classmethod
    def _bind_is_address(cls, value: str) -> str:
        return check_ip_address(value)

    @field_validator("users_file", "password_file", "tls_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @model_validator(mode="after")
    def _cert_and_key(self) -> AdminParams:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: give both, or neither")
        return self
