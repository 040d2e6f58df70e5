"""Running as a systemd service: sd_notify, the watchdog pinger, journald logging."""

from appliance.service.journal import (
    ContextFilter,
    JournaldHandler,
    configure_logging,
    journald_available,
    log_context,
)
from appliance.service.notify import Notifier, WatchdogSettings, socket_send, watchdog_settings
from appliance.service.runner import Service, ServiceControl, run_service
from appliance.service.watchdog import ping_watchdog, start_watchdog

__all__ = [
    "ContextFilter",
    "JournaldHandler",
    "Notifier",
    "Service",
    "ServiceControl",
    "WatchdogSettings",
    "configure_logging",
    "journald_available",
    "log_context",
    "ping_watchdog",
    "run_service",
    "socket_send",
    "start_watchdog",
    "watchdog_settings",
]
