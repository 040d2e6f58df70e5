"""One source of defaults: every component built with its own defaults is the daemon with the default
configuration, and the default file (`appliance config default`) is written from the settings' own
descriptions and loads back as the same settings."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from pydantic import BaseModel

from appliance.config import Settings, load_settings
from appliance.daemon.config_default import default_toml
from appliance.engine_set import session_config
from appliance.pipeline.conversation import Conversation
from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.params import OverlapParams
from appliance.pipeline.session import SessionConfig
from appliance.pipeline.turn import TurnConfig
from engines.files import loads_toml
from engines.params import Params
from engines.tts.clauses import ClauseSplitter
from engines.vad.endpointer import Endpointer
from engines.vad.params import EndpointerParams

REPO = Path(__file__).resolve().parents[1]


def _components() -> list[tuple[type[Params], str]]:
    """Every component's parameter object in the product (found by importing every module of
    ``appliance`` and ``engines`` and walking ``Params``' subclasses, not from a list kept by hand),
    with the configuration section it is part of ("" when none is)."""
    for path in sorted([*(REPO / "appliance").rglob("*.py"), *(REPO / "engines").rglob("*.py")]):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] != "__main__":
            importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    found: set[type[Params]] = set()
    pending = list(Params.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__.startswith(("appliance.", "engines.")) and cls.__module__ != "appliance.config":
            found.add(cls)
    sections = {name: field.annotation for name, field in Settings.model_fields.items()}
    return sorted(
        ((cls, next((n for n, s in sections.items() if s is cls), "")) for cls in found),
        key=lambda pair: pair[0].__name__,
    )


FOUND = _components()
COMPONENTS = [(part, section) for part, section in FOUND if section]


def _nested(cls: type[Params]) -> bool:
    """An item of a component's own key (a tool of ``agent.tools``, its parameters)."""
    return any(
        cls.__name__ in str(field.annotation)
        for owner, _section in FOUND
        for field in owner.model_fields.values()
        if owner is not cls
    )


def test_every_component_with_parameters_is_part_of_the_configuration() -> None:
    orphans = [cls.__qualname__ for cls, section in FOUND if not section and not _nested(cls)]
    assert not orphans, f"parameter objects no configuration section is made of: {orphans}"
    assert {cls.__name__ for cls, _s in COMPONENTS} >= {"CallParams", "EndpointerParams", "LlmParams"}


def not_one_component(schema: type[BaseModel]) -> list[str]:
    """Sections of ``schema`` that are not one component's own parameter class: made of several by
    inheritance, or inheriting another's keys."""
    wrong = []
    for name, field in schema.model_fields.items():
        section = field.annotation
        if not (isinstance(section, type) and section.__bases__ == (Params,)):
            wrong.append(f"[{name}] {getattr(section, '__name__', section)}")
    return wrong


def test_each_section_is_one_component_composed_not_inherited() -> None:
    """A section is one object: a component's own parameter class, made of no other's (a section
    assembled from several by inheritance had to be taken apart again to give each its part)."""
    assert not_one_component(Settings) == []
    inherited = [cls.__qualname__ for cls, _section in FOUND if cls.__bases__ != (Params,)]
    assert not inherited, f"parameter objects that inherit another's keys: {inherited}"


def test_a_section_made_by_inheritance_is_found() -> None:
    class Mixed(EndpointerParams, OverlapParams):
        pass

    class Schema(BaseModel):
        endpointer: EndpointerParams = EndpointerParams()
        mixed: Mixed = Mixed()

    assert not_one_component(Schema) == ["[mixed] Mixed"]


@pytest.mark.parametrize(("part", "section"), COMPONENTS, ids=[p.__name__ for p, _s in COMPONENTS])
def test_the_shipped_default_file_gives_each_component_its_own_defaults(
    part: type[Params], section: str
) -> None:
    """The file `appliance config default` writes (what a site starts from), read through the
    component's own schema, is the component built with its own defaults: a section that redefined a
    key with another default, or a writer that put another value, differs here."""
    written = loads_toml(default_toml()).get(section, {})
    keys = {key: written[key] for key in part.model_fields if key in written}
    assert part.model_validate(keys) == part(), section
    shipped = load_settings(None)
    assert type(getattr(shipped, section)) is part  # the section is it, not a copy or a mixture
    assert getattr(shipped, section) == part()


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
    assert own.overlap == daemon.overlap
    assert own.echo == daemon.echo == EchoGate.of()
    assert own.partials == daemon.partials and daemon.partials.enabled
    assert daemon.turn.replies == TurnConfig().replies
    assert daemon.turn.speech == TurnConfig().speech
    assert daemon.conversation == own.conversation
    assert Conversation().max_messages == settings.conversation.max_history_messages
    assert ClauseSplitter().first_clause_words == settings.tts.first_clause_words
    assert Endpointer().threshold == settings.vad.threshold
