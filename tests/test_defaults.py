"""One source of defaults: every component built with its own defaults is the daemon with the default
configuration, and the default file (`appliance config default`) is written from the settings' own
descriptions and loads back as the same settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from appliance.agent import Conversation
from appliance.config import Settings, load_settings
from appliance.config_default import default_toml
from appliance.engine_set import session_config
from appliance.pipeline.echo_gate import EchoGate, EchoGateParams
from appliance.pipeline.params import HistoryParams, PartialsParams, PrefillParams, ReplyParams
from appliance.pipeline.partials import PartialsConfig
from appliance.pipeline.session import SessionConfig
from appliance.pipeline.turn import TurnConfig
from engines.aec.params import AecParams
from engines.asr.params import AsrParams
from engines.llm.params import LlmParams, LlmServerParams
from engines.params import Params
from engines.tts.clauses import ClauseSplitter
from engines.tts.params import TtsParams
from engines.vad.endpointer import Endpointer, EndpointerParams
from engines.vad.params import VadParams

# Each component's parameter object and the configuration section it is part of.
COMPONENTS: list[tuple[type[Params], str]] = [
    (VadParams, "vad"),
    (EchoGateParams, "vad"),
    (EndpointerParams, "endpointer"),
    (AsrParams, "asr"),
    (PartialsParams, "asr"),
    (LlmParams, "llm"),
    (LlmServerParams, "llm"),
    (PrefillParams, "llm"),
    (TtsParams, "tts"),
    (AecParams, "audio"),
    (ReplyParams, "agent"),
    (HistoryParams, "agent"),
]


def _part(section: BaseModel, part: type[Params]) -> Params:
    return part.model_validate(section.model_dump(include=set(part.model_fields)))


@pytest.mark.parametrize(("part", "section"), COMPONENTS, ids=[p.__name__ for p, _s in COMPONENTS])
def test_a_component_with_its_own_defaults_is_the_shipped_configuration(
    part: type[Params], section: str
) -> None:
    shipped = load_settings(None)
    assert _part(getattr(shipped, section), part) == part()
    assert isinstance(getattr(shipped, section), part)  # the section is made of it, not a copy


def test_the_default_file_written_from_the_descriptions_loads_back_as_the_defaults(tmp_path: Path) -> None:
    text = default_toml()
    written = tmp_path / "default.toml"
    written.write_text(text, encoding="utf-8")
    assert load_settings(written) == load_settings(None) == Settings()
    for name, field in Settings.model_fields.items():  # every key is in it, with its description
        assert f"[{name}]" in text
        section = field.annotation
        assert isinstance(section, type) and issubclass(section, BaseModel)
        for key in section.model_fields:
            assert f"\n{key} = " in text or f"\n# {key} = (unset)" in text or f"[[{name}.{key}]]" in text, key


def test_every_setting_is_described() -> None:
    for name, field in Settings.model_fields.items():
        section = field.annotation
        assert isinstance(section, type) and issubclass(section, BaseModel)
        missing = [key for key, f in section.model_fields.items() if not f.description]
        assert not missing, f"[{name}] keys without a description: {missing}"


def test_the_pipeline_built_with_its_own_defaults_is_the_daemons() -> None:
    settings = load_settings(None)
    daemon = session_config(settings)
    own = SessionConfig()
    assert own.endpointer == daemon.endpointer
    assert own.echo == daemon.echo == EchoGate.of()
    assert (
        own.partials.interval_s == daemon.partials.interval_s
        and own.partials.prefill == daemon.partials.prefill
    )
    assert PartialsConfig().enabled
    assert _part(daemon.turn.replies, ReplyParams) == TurnConfig().replies
    assert _part(daemon.turn.speech, TtsParams) == TurnConfig().speech
    assert _part(daemon.history, HistoryParams) == own.history
    assert Conversation().max_messages == settings.agent.max_history_messages
    assert ClauseSplitter().first_clause_words == settings.tts.first_clause_words
    assert Endpointer().threshold == settings.vad.threshold
