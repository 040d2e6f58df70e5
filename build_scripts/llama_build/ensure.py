"""Pick, build, install and check the llama.cpp build of this machine; fall back to the safe profile."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from build_scripts.llama_build import wheel as wheels_mod
from build_scripts.llama_build.profile import BEST, SAFE, BuildProfile, choose_profile
from engines.llm.smoke import SmokeResult, library_location, run_smoke, smallest_gguf


class SetupFailed(Exception):
    """The set-up cannot give this machine a llama.cpp that runs; the message names the fix."""


@dataclass
class Toolbox:
    """What ``ensure`` does to the world, replaceable in tests (compiling takes ten minutes)."""

    python: str
    venv: Path
    version: str
    features: frozenset[str]
    machine: str | None = None
    extra_args: tuple[str, ...] = ()
    py_tag: str = ""
    log: Callable[[str], None] = print
    build: Callable[[BuildProfile, Path], Path] | None = None
    install: Callable[[wheels_mod.CachedWheel], None] | None = None
    smoke: Callable[[Path], SmokeResult] = field(default=run_smoke)

    def __post_init__(self) -> None:
        if not self.py_tag:
            self.py_tag = wheels_mod.python_tag(self.python)
        if self.build is None:
            self.build = lambda profile, folder: wheels_mod.build_wheel(
                self.python, self.version, profile, folder, log=self.log
            )
        if self.install is None:
            self.install = lambda cached: wheels_mod.install_wheel(self.python, cached, self.venv)

    def profile(self, level: str) -> BuildProfile:
        return choose_profile(self.features, machine=self.machine, level=level, extra_args=self.extra_args)


def _wheel_for(
    tools: Toolbox, wheels: Path, profile: BuildProfile, *, rebuild: bool
) -> wheels_mod.CachedWheel:
    folder = wheels_mod.cache_folder(wheels, tools.version, profile, tools.py_tag)
    found = None if rebuild else wheels_mod.find_cached(folder)
    if found is None:
        assert tools.build is not None
        found = tools.build(profile, folder)
    key = wheels_mod.cache_key(tools.version, profile, tools.py_tag)
    return wheels_mod.CachedWheel(key=key, folder=folder, wheel=found, profile=profile)


def chosen_profile(tools: Toolbox, wheels: Path, level: str = BEST) -> BuildProfile:
    profile = tools.profile(level)
    folder = wheels_mod.cache_folder(wheels, tools.version, profile, tools.py_tag)
    if level == BEST and wheels_mod.has_failed(folder):
        safe = tools.profile(SAFE)
        if safe != profile:
            tools.log(
                f"llama.cpp built with {profile.name} crashed on this machine before; using {safe.name}"
            )
        return safe
    return profile


def install(tools: Toolbox, wheels: Path, level: str = BEST) -> wheels_mod.CachedWheel:
    """The wheel for this machine, compiled if the cache has none, installed if the venv has another."""
    cached = _wheel_for(tools, wheels, chosen_profile(tools, wheels, level), rebuild=False)
    if wheels_mod.installed_key(tools.venv) != cached.key:
        tools.log(f"installing llama-cpp-python {tools.version} ({cached.profile.name})")
        assert tools.install is not None
        tools.install(cached)
    return cached


def _installed_profile(tools: Toolbox, wheels: Path) -> wheels_mod.CachedWheel | None:
    key = wheels_mod.installed_key(tools.venv)
    for folder in wheels.glob(f"{wheels_mod.PACKAGE}-*-{key}"):
        try:
            record = json.loads((folder / wheels_mod.BUILD_RECORD).read_text())["profile"]
            profile = BuildProfile(
                name=record["name"],
                cmake_args=tuple(record["cmake_args"]),
                features=tuple(record["features"]),
                machine=record["machine"],
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found = wheels_mod.find_cached(folder)
        if found is not None and key is not None:
            return wheels_mod.CachedWheel(key=key, folder=folder, wheel=found, profile=profile)
    return None


def check(tools: Toolbox, wheels: Path, bundle: Path) -> SmokeResult:
    """Smoke-decode the installed build; if it dies on a signal, rebuild once with the safe profile."""
    model = smallest_gguf(bundle)
    if model is None:
        raise SetupFailed(
            f"no language model in the bundle {bundle} to check llama.cpp with; "
            f"build it first: python -m build_scripts bundle --out {bundle}"
        )
    result = tools.smoke(model)
    if result.ok:
        tools.log(f"llama.cpp runs here: {result.detail} in {result.seconds:.1f} s")
        return result
    if not result.crashed:
        raise SetupFailed(f"llama.cpp check: {result.detail}")
    current = _installed_profile(tools, wheels)
    built_with = current.profile.describe() if current else "an unknown build (not installed by the set-up)"
    tools.log(
        f"error: llama.cpp ({library_location()}, llama-cpp-python {tools.version}) {result.detail}: "
        f"it was built with {built_with}; rebuilding once with the safe profile"
    )
    if current is not None:
        wheels_mod.mark_failed(current.folder, result.detail)
    safe = tools.profile(SAFE)
    cached = _wheel_for(tools, wheels, safe, rebuild=True)
    assert tools.install is not None
    tools.install(cached)
    again = tools.smoke(model)
    if again.ok:
        tools.log(f"llama.cpp runs here with {safe.name}: {again.detail}")
        return again
    wheels_mod.mark_failed(cached.folder, again.detail)
    raise SetupFailed(
        f"llama.cpp does not run on this machine even with {safe.describe()}: {again.detail}. "
        "Fix: look for the faulting instruction in the kernel log (dmesg | tail), then set CMAKE_ARGS "
        "to options this processor runs (e.g. -DGGML_AVX512=OFF) and run ./scripts/setup again; "
        "supported machines are x86-64 with AVX2, FMA and F16C, and Jetson Orin"
    )


def parse_extra(cmake_args: str | None) -> tuple[str, ...]:
    return tuple((cmake_args or "").split())
