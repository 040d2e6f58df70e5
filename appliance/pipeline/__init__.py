"""The streaming pipeline: sessions, turns, engine worker threads, playback with barge-in.

Each module is imported by its own name (``appliance.pipeline.session``...): the package itself
imports nothing, so the configuration can be built from the pipeline's parameter objects
(``appliance.pipeline.params``) without loading the pipeline.
"""
