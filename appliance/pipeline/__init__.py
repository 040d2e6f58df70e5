"""The streaming pipeline: sessions, turns, engine worker threads, playback with barge-in."""

from __future__ import annotations

from appliance.agent import Conversation
from appliance.pipeline.playback import Player
from appliance.pipeline.played import played_text
from appliance.pipeline.session import EchoGate, Session, SessionConfig, SessionEngines
from appliance.pipeline.turn import Stage, Turn, TurnConfig, TurnEngines, TurnFailed
from appliance.pipeline.workers import EngineWorker

__all__ = [
    "Conversation",
    "EchoGate",
    "EngineWorker",
    "Player",
    "Session",
    "SessionConfig",
    "SessionEngines",
    "Stage",
    "Turn",
    "TurnConfig",
    "TurnEngines",
    "TurnFailed",
    "played_text",
]
