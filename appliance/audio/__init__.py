"""Audio sources and sinks: microphone and speaker (sounddevice), WAV files, memory, null.

Inside the appliance audio moves as float32 mono frames of 512 samples (32 ms) at 16 kHz; device and
file rates are converted at these edges.
"""

from __future__ import annotations

from appliance.audio.base import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE_HZ, AudioSink, AudioSource
from appliance.audio.files import ArraySource, MemorySink, NullSink, WavSink, wav_file_source

__all__ = [
    "FRAME_S",
    "FRAME_SAMPLES",
    "SAMPLE_RATE_HZ",
    "ArraySource",
    "AudioSink",
    "AudioSource",
    "MemorySink",
    "NullSink",
    "WavSink",
    "wav_file_source",
]
