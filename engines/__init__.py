"""Model runtimes behind small synchronous interfaces.

Each domain (``vad``, ``asr``, ``llm``, ``tts``) has an interface module and one module per
backend; runtimes are imported lazily inside the backend module. Nothing here imports ``appliance``.
"""
