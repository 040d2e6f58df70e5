"""The site's facts files on the admin page: read, and replaced by an admin (the file before kept as
``FILE.bak``). The text is checked as the answer path reads it before anything is written; the facts in
service change at the daemon's next start (the restart button)."""

from __future__ import annotations

import threading
from pathlib import Path

from appliance.admin.schemas import FactsFileView, FactsSaved
from appliance.config import Settings
from appliance.config_writer import write_keeping_backup
from appliance.tools.facts import FactsFileError, facts_in
from engines.setting_files import FACTS, SettingFileError, read_setting_text

_write_lock = threading.Lock()


class FactsNotFound(LookupError):
    """No facts tool of that name in the configuration."""


def facts_files(settings: Settings) -> list[FactsFileView]:
    """Each facts tool's file, with its text and how many entries the answer path reads in it."""
    shown = []
    for tool in settings.agent.tools:
        if tool.kind != "facts" or tool.file is None:
            continue
        try:
            text = read_setting_text(tool.file, FACTS)
            shown.append(
                FactsFileView(
                    tool=tool.name,
                    path=str(tool.file),
                    text=text,
                    sections=len(facts_in(text, str(tool.file))),
                )
            )
        except FileNotFoundError:
            problem = f"{tool.file} does not exist (fix: write the site's facts here and save)"
            shown.append(
                FactsFileView(tool=tool.name, path=str(tool.file), text="", sections=0, problem=problem)
            )
        except (SettingFileError, FactsFileError) as err:
            shown.append(
                FactsFileView(tool=tool.name, path=str(tool.file), text="", sections=0, problem=str(err))
            )
    return shown


def save_facts(settings: Settings, tool_name: str, text: str) -> FactsSaved:
    """``text`` as the file of the facts tool ``tool_name``; FactsFileError (nothing written) when the
    answer path could not read it, FactsNotFound when no such tool is configured."""
    path = _file_of(settings, tool_name)
    if len(text.encode("utf-8")) > FACTS.max_bytes:
        raise FactsFileError(
            f"the facts are {len(text.encode('utf-8'))} bytes; a facts file holds at most {FACTS.max_bytes}",
            fix="keep the site's facts to a few pages",
        )
    entries = len(facts_in(text, str(path)))
    with _write_lock:
        backup = write_keeping_backup(path, text if text.endswith("\n") else text + "\n")
    return FactsSaved(path=str(path), backup=str(backup) if backup else None, sections=entries)


def _file_of(settings: Settings, tool_name: str) -> Path:
    for tool in settings.agent.tools:
        if tool.name == tool_name and tool.kind == "facts" and tool.file is not None:
            return tool.file
    raise FactsNotFound(f"no facts tool named {tool_name!r} in the configuration ([[agent.tools]])")
