"""The daemon's life, from the configuration it starts with to the engines it serves with and the
bundle versions it moves between. Nothing is imported here: each part is imported by its own name.

- ``start_check``: whether a configuration can start on this machine (the admin page's write,
  ``appliance config check`` and the start alike); ``start_plan``: what the daemon starts with;
  ``last_good``: the last configuration that started; ``config_default``: the default file, from the schema.
- ``load``: before READY, the engines and store (or the last good configuration, or the previous bundle
  version); ``service``: the composition root, serving sessions, SIP and the admin page until stopped.
- ``bundle_view``: what the daemon says of its bundle; ``bundle_switch``: a version activated while it
  runs, switched to between turns; ``crash_guard``: a version that keeps bringing it down, rolled back;
  ``canary`` and ``canary_worker``: a candidate version measured against the active one first.
- ``panel``: what the admin page's control panel asks of the running daemon.
"""
