"""``[sip]``: the extension, its phone system, the SIP and RTP listeners and their limits (what a call
says and does, ``[call]``: appliance/pipeline/params.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from appliance.certificates import normal_fingerprint
from engines.params import Params, check_ip_address, ms_to_s


class SipParams(Params):
    """Phone calls over SIP: the extension, its phone system, the SIP and RTP listeners and their limits."""

    enabled: bool = Field(False, description="answer SIP calls")
    bind_host: str = Field(
        "127.0.0.1", description="the address SIP listens on (0.0.0.0: every interface, with advertise_host)"
    )
    advertise_host: str | None = Field(
        None, description="address put in Contact and SDP; needed when bind_host is 0.0.0.0"
    )
    port: int = Field(5060, ge=0, le=65535, description="UDP port for SIP; 0 picks a free one")
    max_calls: int = Field(2, ge=1, le=64, description="more calls at once are refused (sip.full_status)")
    full_status: Literal[486, 503] = Field(
        503,
        description="the answer to a call over max_calls: 503 Service Unavailable with Retry-After (a SIP "
        "proxy then tries another device), or 486 Busy Here (the caller hears busy)",
    )
    retry_after_s: int = Field(5, ge=1, le=3600, description="Retry-After of a 503 (device full)")
    allow_from: tuple[str, ...] = Field(("127.0.0.1/32",), description="peer networks; others get 403")
    rtp_port_min: int = Field(40000, ge=1024, le=65535, description="the calls' RTP ports, from this")
    rtp_port_max: int = Field(40100, ge=1024, le=65535, description="... to this")
    rtp_timeout_s: float = Field(30.0, gt=0.0, le=3600.0, description="a call with no RTP this long ends")
    answer_delay_s: float = Field(0.0, ge=0.0, le=30.0, description="ringing time before answering")
    t1_ms: int = Field(
        500,
        ge=50,
        le=2000,
        description="RFC 3261 timer T1, the round-trip estimate: answers are repeated from T1 on, and a "
        "call whose 200 OK is never ACKed ends after 64*T1 (32 s at 500 ms), freeing its slot; lower it "
        "only where the phone system is on the same LAN",
    )
    codecs: tuple[Literal["PCMU", "PCMA"], ...] = Field(
        ("PCMU", "PCMA"), min_length=1, description="offered codecs; the caller's order decides among these"
    )
    jitter_depth_packets: int = Field(3, ge=0, le=25, description="reordering allowance, 20 ms packets")
    rtp_latch: bool = Field(
        True,
        description="take media only from the first port of the caller's host that sends it (symmetric RTP)",
    )
    tcp: bool = Field(True, description="also accept SIP over TCP on the same port")
    tcp_idle_timeout_s: float = Field(
        120.0, gt=0.0, le=3600.0, description="a TCP connection with no data this long is closed"
    )
    tcp_message_timeout_s: float = Field(
        10.0, gt=0.0, le=300.0, description="a message begun on TCP must be complete within this"
    )
    tcp_max_per_source: int = Field(8, ge=1, le=1024, description="TCP connections at once from one address")
    user_agent: str = Field("voice-appliance", description="the User-Agent and Server header")
    registrar: str = Field(
        "",
        description="register as an extension with the site's phone system at this address, IP[:port] "
        '(never a name: no lookups at run time); "" registers nowhere',
    )
    register_user: str = Field("", description="the extension's user name (the number callers dial)")
    register_auth_user: str = Field("", description="the digest authentication user, when not register_user")
    register_domain: str = Field(
        "", description="the SIP domain of the extension (default: the registrar's address)"
    )
    register_password_file: Path | None = Field(
        None, description="a file holding the extension's password, readable by the service only (mode 600)"
    )
    register_expires_s: int = Field(
        300,
        ge=30,
        le=86400,
        description="the registration's lifetime asked for; renewed at 80% of what is granted",
    )
    register_transport: Literal["udp", "tcp", "tls"] = Field(
        "udp",
        description="how the registration reaches the registrar: udp, tcp (a connection opened to it, "
        "again whenever it was closed; the Contact then asks for calls over TCP), or tls (the same over "
        "TLS to the registrar's TLS port, its certificate checked with tls_ca_file or tls_peer_fingerprint)",
    )
    tls: bool = Field(
        False,
        description="also accept SIP over TLS on tls_port (on whenever register_transport is tls), "
        "presenting tls_cert_file or the device's certificate",
    )
    tls_port: int = Field(
        5061, ge=0, le=65535, description="the TCP port of SIP over TLS; 0 picks a free one"
    )
    tls_cert_file: Path | None = Field(
        None,
        description="the site's certificate for this device (PEM, with its chain): presented to callers "
        "and, as a client certificate, to the registrar; unset: the device's own (admin.tls_dir)",
    )
    tls_key_file: Path | None = Field(None, description="... and its private key (PEM)")
    tls_ca_file: Path | None = Field(
        None,
        description="the CA certificates (PEM) the phone system's certificate must be signed by; its "
        "address must be among the certificate's names",
    )
    tls_peer_fingerprint: str = Field(
        "",
        description="instead of tls_ca_file: the phone system's certificate fingerprint, "
        "sha256:AB:CD:... (pinned: any other certificate is refused)",
    )
    media_encryption: Literal["none", "optional", "srtp"] = Field(
        "none",
        description="SRTP for the calls' audio, keys in SDP (SDES): none (plain RTP only), optional "
        "(SRTP when the caller offers it), or srtp (a call offering plain RTP is refused with 488)",
    )
    register_retry_max_s: float = Field(
        300.0,
        ge=5.0,
        le=3600.0,
        description="a failing registration is retried after 5 s, doubling up to this (a registrar's "
        "Retry-After too)",
    )
    register_min_interval_s: float = Field(
        30.0,
        ge=1.0,
        le=3600.0,
        description="REGISTER at most this often, even when the registrar grants a shorter lifetime",
    )

    @property
    def registrar_address(self) -> tuple[str, int]:
        """``registrar`` as (host, port), 5060 when it names none (5061 over TLS)."""
        host, port = _split_registrar(self.registrar)
        return host, int(port) if port else 5061 if self.register_transport == "tls" else 5060

    @property
    def tls_listening(self) -> bool:
        return self.tls or self.register_transport == "tls"

    @property
    def t1_s(self) -> float:
        return ms_to_s(self.t1_ms)

    def transfer_domain(self) -> str:
        """Where an extension is reached: the extension's domain, else the registrar with its port (a
        phone told only the address would call port 5060)."""
        if self.register_domain:
            return self.register_domain
        host, port = _split_registrar(self.registrar)
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{port}" if port else host

    @model_validator(mode="after")
    def _tls_settings(self) -> SipParams:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("sip.tls_cert_file and sip.tls_key_file go together: give both, or neither")
        if self.tls_ca_file is not None and self.tls_peer_fingerprint:
            raise ValueError("give sip.tls_ca_file or sip.tls_peer_fingerprint, not both")
        if self.register_transport == "tls" and self.tls_ca_file is None and not self.tls_peer_fingerprint:
            raise ValueError(
                'sip.register_transport = "tls" needs the phone system\'s certificate checked: set '
                "sip.tls_ca_file to the CA that signed it (PEM), or sip.tls_peer_fingerprint to its "
                "fingerprint (sha256:AB:CD:...; a refused certificate's fingerprint is in the log)"
            )
        return self

    @field_validator("tls_peer_fingerprint")
    @classmethod
    def _fingerprint(cls, value: str) -> str:
        return normal_fingerprint(value) if value.strip() else ""

    @field_validator("tls_ca_file", "tls_cert_file", "tls_key_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        if not value.is_file():
            raise ValueError(f"{value} is not a file (a PEM file is expected)")
        return value

    @field_validator("registrar")
    @classmethod
    def _registrar_is_address(cls, value: str) -> str:
        if not value:
            return value
        host, port = _split_registrar(value)
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{value!r}: the port must be 1-65535")
        check_ip_address(host)
        return value

    @field_validator("register_user")
    @classmethod
    def _user_with_registrar(cls, value: str, info: Any) -> str:
        if info.data.get("registrar") and not value:
            raise ValueError(
                "set the extension's user name (sip.register_user) to register with sip.registrar"
            )
        if any(c in value for c in ' <>@:;"'):
            raise ValueError(f'{value!r} is not a SIP user name (no spaces or < > @ : ; ")')
        return value

    @field_validator("register_password_file")
    @classmethod
    def _password_file(cls, value: Path | None, info: Any) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        try:
            mode = value.stat().st_mode
        except OSError as err:
            raise ValueError(f"cannot read {value}: {err.strerror}") from err
        if mode & 0o077:
            raise ValueError(f"{value} can be read by other users (mode {mode & 0o777:o}); chmod 600 it")
        return value

    @field_validator("bind_host")
    @classmethod
    def _bind_is_address(cls, value: str) -> str:
        return check_ip_address(value)

    @field_validator("advertise_host")
    @classmethod
    def _advertised(cls, value: str | None, info: Any) -> str | None:
        if value is None and info.data.get("bind_host") in ("0.0.0.0", "::"):
            raise ValueError("set sip.advertise_host to the address callers reach when bind_host is 0.0.0.0")
        return None if value is None else check_ip_address(value)

    @field_validator("allow_from")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import ipaddress

        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as err:
                raise ValueError(f"{entry!r} is not an address or network like 10.0.0.0/8") from err
        return value

    @field_validator("rtp_port_max")
    @classmethod
    def _rtp_range(cls, value: int, info: Any) -> int:
        low = info.data.get("rtp_port_min")
        if low is not None and value < low + 1:
            raise ValueError(f"must be above rtp_port_min ({low}): each call needs an even port")
        return value


def _split_registrar(value: str) -> tuple[str, str]:
    """(host, port or "") of ``IP[:port]``; an IPv6 address has more than one colon and no port here."""
    host, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return host, port
