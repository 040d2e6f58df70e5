"""The admin page: status, latency and configuration of the device, behind a login.

The daemon builds it with :func:`create_app` over an :class:`AdminBackend` (normally
:class:`LocalBackend`) and runs :func:`serve` as a task on its own event loop.
"""

from __future__ import annotations

from appliance.admin.app import create_app
from appliance.admin.backend import AdminBackend, ConfigNotWritable, LiveRegistry
from appliance.admin.daemon import engine_states, llm_load, run_admin_page
from appliance.admin.local import LocalBackend
from appliance.admin.schemas import EngineState
from appliance.admin.server import bind_socket, serve
from appliance.admin.users import UserDirectory

__all__ = [
    "AdminBackend",
    "ConfigNotWritable",
    "EngineState",
    "LiveRegistry",
    "LocalBackend",
    "UserDirectory",
    "bind_socket",
    "create_app",
    "engine_states",
    "llm_load",
    "run_admin_page",
    "serve",
]
