"""Field technician's tooling: preflight, bundle import, engine build, site config, self-test."""
