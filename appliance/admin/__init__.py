"""The admin page: status, latency and configuration of the device, behind a login.

The daemon builds it with ``app.create_app`` over an ``backend.AdminBackend`` (normally
``local.LocalBackend``) and runs ``server.serve`` as a task on its own event loop
(``daemon.run_admin_page``). Nothing is imported here, so that its settings (``params``) load alone.
"""
