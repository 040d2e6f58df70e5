"""Model runtimes behind small synchronous interfaces.

Each domain (``vad``, ``asr``, ``llm``, ``tts``) has an interface module and one module per
backend; runtimes are imported lazily inside the backend module. Nothing here imports ``appliance``.
"""

import os

# ONNX Runtime (1.29 and later) uploads telemetry from Linux too: a few seconds after the first
# session it resolves and contacts a Microsoft collector. Nothing may leave the device, so it is
# switched off before any runtime loads (the switch is read once, when ONNX Runtime initialises);
# the service unit sets it as well. tests/test_airgap.py checks it in a network namespace.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"
