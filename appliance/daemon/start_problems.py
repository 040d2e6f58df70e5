"""What would stop the engines from loading with a configuration, found without loading them: the
bundle's models and voice, the site server's address, the tools' files and secrets, the persona's
length. One answer for ``start_check`` (the daemon's start, ``appliance config check``) and the admin
page's write."""

from __future__ import annotations

from pathlib import Path

from appliance.config import ConfigProblem, Settings
from appliance.engine_set import llm_prompt
from engines.bundle import Bundle
from engines.errors import EngineError
from engines.setting_files import same_file
from engines.vad.params import EndpointerMode
from engines.wake.params import ActivationMode


def startup_problems(settings: Settings) -> list[ConfigProblem]:
    """What would stop the engines from loading with these settings, found without loading them:
    ``llm.model``, ``asr.model`` and ``tts.voice`` against what the bundle holds (each problem lists
    what is there), and the persona's tokens against ``llm.context_tokens``; a bundle that cannot be
    opened is a problem of ``bundle.dir``."""
    from engines.asr.artifacts import whisper_models
    from engines.denoise import missing_artifacts
    from engines.llm import available_models
    from engines.tts import bundled_voices
    from engines.turn import SMART_TURN_ARTIFACT
    from engines.wake import missing_artifacts as missing_wake

    try:
        # Presence and sizes (stat calls, no hashing): a folder with a manifest and no model files
        # is no bundle to start on.
        bundle = Bundle.open(settings.bundle.dir, verify=True)
    except EngineError as err:
        return [
            ConfigProblem(
                "bundle.dir", f"the engine bundle cannot be opened: {err}", str(settings.bundle.dir)
            )
        ]
    models = available_models(bundle)
    choices = (
        ("llm.model", settings.llm.model, models, "appliance bundle add-model GGUF --name NAME"),
        (
            "asr.model",
            settings.asr.model,
            whisper_models(bundle.manifest.artifacts),
            "python -m build_scripts.whisper export",
        ),
        ("tts.voice", settings.tts.voice, bundled_voices(bundle), "the bundle build"),
    )
    problems = [
        ConfigProblem(
            key,
            f"not in the bundle {bundle.root}; it has: {', '.join(have) or 'none'} (add one with {how})",
            value,
        )
        for key, value, have, how in choices
        if value not in have
    ]
    if (
        settings.endpointer.mode == EndpointerMode.SMART_TURN
        and bundle.manifest.get(SMART_TURN_ARTIFACT) is None
    ):
        problems.append(
            ConfigProblem(
                "endpointer.mode",
                f"the bundle {bundle.root} has no Smart Turn model ({SMART_TURN_ARTIFACT}); rebuild it with "
                f"python -m build_scripts bundle --out {bundle.root}, or set endpointer.mode = 'silence'",
                "smart_turn",
            )
        )
    problems += _lacking(
        "denoise.engine",
        settings.denoise.engine,
        bundle,
        missing_artifacts(bundle, settings.denoise.engine),
        because="on this machine: the libraries are per platform",
        otherwise="denoise.engine = 'none'",
    )
    if settings.wake.activation == ActivationMode.WAKE_WORD:
        problems += _lacking(
            "wake.model",
            settings.wake.model,
            bundle,
            missing_wake(bundle, settings.wake.model),
            because="its wheel needs glibc 2.35",
            otherwise="wake.activation = 'always'",
        )
    if settings.llm.model in models:
        problems += _persona_problems(settings, bundle)
    return problems + tool_problems(settings) + llm_server_problems(settings)


def _lacking(
    key: str, value: str, bundle: Bundle, lacking: list[str], *, because: str, otherwise: str
) -> list[ConfigProblem]:
    """The setting ``key`` needs files the bundle lacks: rebuild it (``because``: why it may lack them), or
    set ``otherwise``."""
    if not lacking:
        return []
    message = (
        f"the bundle {bundle.root} lacks {', '.join(lacking)}; rebuild it with python -m build_scripts "
        f"bundle --out {bundle.root} ({because}), or set {otherwise}"
    )
    return [ConfigProblem(key, message, value)]


def llm_server_problems(settings: Settings) -> list[ConfigProblem]:
    """``llm.backend = "openai"`` without a server URL, or with a host the settings do not allow."""
    from engines.llm.openai_server import check_server_url

    server = settings.llm_server
    if settings.llm.backend != "openai":
        return []
    try:
        check_server_url(server)
    except EngineError as err:
        return [ConfigProblem("llm_server.server_url", str(err), server.server_url)]
    key_file = server.server_api_key_file
    if key_file is not None and not key_file.is_file():
        return [ConfigProblem("llm_server.server_api_key_file", "the file does not exist", str(key_file))]
    return []


def tool_problems(settings: Settings) -> list[ConfigProblem]:
    """A facts file that cannot be read, an http tool whose host is not in ``agent.allowed_hosts``,
    two tools of one name."""
    from urllib.parse import urlsplit

    from appliance.tools.facts import FactsFileError, read_facts
    from engines.net import host_allowed

    problems = []
    names: set[str] = set()
    for index, tool in enumerate(settings.agent.tools):
        key = f"agent.tools[{index}]"
        if tool.name in names:
            problems.append(ConfigProblem(f"{key}.name", "another tool has this name", tool.name))
        names.add(tool.name)
        if tool.kind == "facts" and tool.file is not None:
            secret = _secret_setting(settings, tool.file)
            if secret is not None:
                why = f"it is {secret}: a secret must never go into the model's prompt (name the site's facts file)"
                problems.append(ConfigProblem(f"{key}.file", why, str(tool.file)))
                continue
            try:
                read_facts(tool.file)
            except FactsFileError as err:
                problems.append(ConfigProblem(f"{key}.file", str(err), str(tool.file)))
        if tool.kind == "http":
            host = urlsplit(tool.url).hostname or ""
            if not host_allowed(host, settings.agent.allowed_hosts):
                problems.append(
                    ConfigProblem(
                        f"{key}.url",
                        f"its host {host} is not in agent.allowed_hosts: the appliance would refuse to "
                        "connect (add the host there, or fix the URL)",
                        tool.url,
                    )
                )
    return problems


def _secret_setting(settings: Settings, path: Path) -> str | None:
    """The setting whose secret file ``path`` is (the SIP password, the admin accounts, ...), or None."""
    secrets = {
        "sip.register_password_file": settings.sip.register_password_file,
        "admin.users_file": settings.admin.users_file,
        "admin.password_file": settings.admin.password_file,
        "admin.metrics_token_file": settings.admin.metrics_token_file,
        "llm_server.server_api_key_file": settings.llm_server.server_api_key_file,
    }
    for name, secret in secrets.items():
        if secret is not None and (same_file(path, secret) or path.resolve() == secret.resolve()):
            return f"the file of {name}"
    return None


def _persona_problems(settings: Settings, bundle: Bundle) -> list[ConfigProblem]:
    from engines.llm.llamacpp import system_prompt_tokens

    llm = settings.llm
    try:
        tokens = system_prompt_tokens(bundle.path(f"llm/{llm.model}"), *llm_prompt(settings, bundle))
    except EngineError:
        return []  # a damaged model file: the daemon names it, with the fix
    if tokens + llm.max_reply_tokens < llm.context_tokens:
        return []
    persona = settings.agent.persona
    shown = persona if len(persona) <= 60 else f"{persona[:57]}... ({len(persona)} characters)"
    return [
        ConfigProblem(
            "agent.persona",
            f"the system prompt takes {tokens} tokens of {llm.model}; with llm.max_reply_tokens = "
            f"{llm.max_reply_tokens} it does not fit llm.context_tokens = {llm.context_tokens} "
            "(shorten the persona or raise llm.context_tokens)",
            shown,
        )
    ]
