"""The field technician's tool (``python -m provisioning``): preflight, signed bundle import, engine
build, site configuration, admin password, systemd units, a self-test turn and a report.

Each step records its outcome under the state folder, so an interrupted run resumes where it stopped.
"""
