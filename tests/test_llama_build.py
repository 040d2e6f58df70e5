"""The llama.cpp build: a profile the processor runs, a cache keyed by it, a checked install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from build_scripts.llama_build import wheel as wheel_mod
from build_scripts.llama_build.ensure import SetupFailed, Toolbox, check, chosen_profile, install
from build_scripts.llama_build.profile import BEST, SAFE, UnsupportedMachine, choose_profile
from build_scripts.llama_build.scan import AMX_MNEMONICS, forbidden_instructions
from engines.bundle import Bundle
from engines.llm.smoke import FAULT_ENV, SmokeResult, run_smoke, smallest_gguf

AVX2 = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
AVX512 = AVX2 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = AVX512 | {"avx512vbmi", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}
ORIN = {"fp", "asimd", "asimddp", "fphp", "asimdhp", "atomics", "sve_not_there"}


def _on(profile_args: tuple[str, ...]) -> set[str]:
    return {a.removeprefix("-D").removesuffix("=ON") for a in profile_args if a.endswith("=ON")}


def test_amx_is_never_compiled_in_even_where_the_processor_advertises_it() -> None:
    for level in (BEST, SAFE):
        profile = choose_profile(SAPPHIRE_RAPIDS, machine="x86_64", level=level)
        assert not {o for o in _on(profile.cmake_args) if "AMX" in o}
        assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(
            profile.cmake_args
        )
        assert "-DGGML_NATIVE=OFF" in profile.cmake_args


def test_best_uses_the_avx512_the_processor_has_and_safe_is_avx2() -> None:
    best = choose_profile(AVX512, machine="x86_64", level=BEST)
    assert best.name == "x86-64-avx512"
    assert {"GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16"} <= _on(best.cmake_args)
    assert "GGML_AVX512_VBMI" not in _on(best.cmake_args)  # not in AVX512's flags above
    safe = choose_profile(AVX512, machine="x86_64", level=SAFE)
    assert safe.name == "x86-64-avx2"
    assert not {o for o in _on(safe.cmake_args) if "AVX512" in o or "VNNI" in o}
    assert choose_profile(AVX2, machine="x86_64").name == "x86-64-avx2"


def test_a_processor_without_avx2_is_refused_with_what_it_lacks() -> None:
    with pytest.raises(UnsupportedMachine, match="lacks avx2, fma"):
        choose_profile({"sse4_2", "avx", "f16c"}, machine="x86_64")


def test_arm64_profiles_never_enable_sve() -> None:
    orin = choose_profile(ORIN, machine="aarch64")
    assert "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16" in orin.cmake_args
    assert choose_profile(ORIN, machine="aarch64", level=SAFE).name == "arm64-v8"
    assert not any("sve" in a for a in orin.cmake_args)


def test_the_cache_key_changes_with_options_features_and_version() -> None:
    base = choose_profile(AVX512, machine="x86_64")
    key = wheel_mod.cache_key("0.3.36", base, "py3")
    others = {
        wheel_mod.cache_key("0.3.36", choose_profile(AVX512 | {"avx512vbmi"}, machine="x86_64"), "py3"),
        wheel_mod.cache_key("0.3.36", choose_profile(AVX512, machine="x86_64", level=SAFE), "py3"),
        wheel_mod.cache_key(
            "0.3.36", choose_profile(AVX512, machine="x86_64", extra_args=["-DGGML_CUDA=on"]), "py3"
        ),
        wheel_mod.cache_key("0.3.37", base, "py3"),
    }
    assert key not in others and len(others) == 4
    assert wheel_mod.cache_key("0.3.36", choose_profile(AVX512, machine="x86_64"), "py3") == key


def test_build_asks_pip_for_a_fresh_compile_with_the_profile_options(tmp_path: Path) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_pip(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        calls.append((command, env))
        out = Path(command[command.index("-w") + 1])
        (out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
        return subprocess.CompletedProcess(command, 0)

    profile = choose_profile(SAPPHIRE_RAPIDS, machine="x86_64")
    folder = tmp_path / "cache"
    built = wheel_mod.build_wheel("python3", "0.3.36", profile, folder, run=fake_pip, log=lambda _: None)
    command, env = calls[0]
    assert "--no-cache-dir" in command and "--no-binary" in command
    assert env["CMAKE_ARGS"].split() == list(profile.cmake_args)
    assert wheel_mod.find_cached(folder) == built
    record = json.loads((folder / wheel_mod.BUILD_RECORD).read_text())
    assert record["profile"]["cmake_args"] == list(profile.cmake_args)
    assert record["profile"]["features"] == sorted(SAPPHIRE_RAPIDS)


def test_a_folder_without_its_build_record_is_not_a_cached_wheel(tmp_path: Path) -> None:
    (tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"half")
    assert wheel_mod.find_cached(tmp_path) is None


def test_one_wheel_serves_every_python_3_and_a_cpython_bound_one_is_not_reused(tmp_path: Path) -> None:
    assert wheel_mod.python_tag(sys.executable) == "py3"  # 3.10 and 3.11 share the cache folder
    (tmp_path / wheel_mod.BUILD_RECORD).write_text("{}")
    (tmp_path / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").write_bytes(b"PK")
    assert wheel_mod.find_cached(tmp_path) is None


# -- the installed build --------------------------------------------------------------------------


def _installed_libraries() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    return sorted((Path(spec.origin).parent / "lib").glob("libggml-cpu*.so*"))


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")
def test_the_installed_llama_cpp_holds_no_amx_instruction() -> None:
    libraries = _installed_libraries()
    assert libraries, "llama-cpp-python has no libggml-cpu library"
    record = json.loads((Path(sys.prefix) / wheel_mod.INSTALLED_RECORD).read_text())
    allowed = "avx512" in record["profile"] or "arm64" in record["profile"]
    for library in libraries:
        assert forbidden_instructions(library, avx512_allowed=allowed) == {}, library


@pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("objdump") is None, reason="needs gcc and objdump"
)
def test_the_scan_finds_amx_and_avx512_where_they_are(tmp_path: Path) -> None:
    source = tmp_path / "tiles.c"
    source.write_text(
        'void tiles(const void *cfg) { __asm__ volatile("ldtilecfg (%0)" :: "r"(cfg)); }\n'
        'void wide(void) { __asm__ volatile("vpxord %zmm0, %zmm0, %zmm0"); }\n'
    )
    obj = tmp_path / "tiles.o"
    subprocess.run(["gcc", "-c", "-O1", str(source), "-o", str(obj)], check=True)
    found = forbidden_instructions(obj, avx512_allowed=False)
    assert found == {"ldtilecfg": 1, "avx-512 (zmm)": 1}
    assert forbidden_instructions(obj, avx512_allowed=True) == {"ldtilecfg": 1}
    assert "tileloadd" in AMX_MNEMONICS


# -- the smoke decode and the fallback -------------------------------------------------------------


@pytest.fixture(scope="module")
def gguf(bundle: Bundle) -> Path:
    model = smallest_gguf(bundle.root)
    assert model is not None
    return model


def test_the_smoke_decode_runs_the_installed_build(gguf: Path) -> None:
    result = run_smoke(gguf)
    assert result.ok, result.detail
    assert "decoded" in result.detail and "CPU" in result.system_info


def test_a_child_killed_by_a_signal_is_reported_with_its_name(
    gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_ENV, "SIGILL")
    result = run_smoke(gguf)
    assert not result.ok and result.crashed and result.signal_name == "SIGILL"
    assert "died on SIGILL" in result.detail


def _tools(tmp_path: Path, log: list[str], **kwargs: object) -> Toolbox:
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)

    def build(profile: Any, folder: Path) -> Path:
        log.append(f"build {profile.name}")
        folder.mkdir(parents=True, exist_ok=True)
        wheel = folder / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
        wheel.write_bytes(b"wheel")
        record = {
            "profile": {
                "name": profile.name,
                "cmake_args": list(profile.cmake_args),
                "features": list(profile.features),
                "machine": profile.machine,
            }
        }
        (folder / wheel_mod.BUILD_RECORD).write_text(json.dumps(record))
        return wheel

    def installed(cached: wheel_mod.CachedWheel) -> None:
        log.append(f"install {cached.profile.name}")
        (venv / wheel_mod.INSTALLED_RECORD).write_text(json.dumps({"key": cached.key}))

    defaults: dict[str, object] = {
        "python": sys.executable, "venv": venv, "version": "0.3.36", "features": frozenset(AVX512),
        "machine": "x86_64", "py_tag": "py3", "log": log.append, "build": build, "install": installed,
    }  # fmt: skip
    defaults.update(kwargs)
    return Toolbox(**defaults)  # type: ignore[arg-type]


def test_install_builds_once_per_profile_and_reinstalls_only_on_change(tmp_path: Path) -> None:
    log: list[str] = []
    tools = _tools(tmp_path, log)
    wheels = tmp_path / "wheels"
    install(tools, wheels)
    install(tools, wheels)
    assert log == [
        "build x86-64-avx512",
        "installing llama-cpp-python 0.3.36 (x86-64-avx512)",
        "install x86-64-avx512",
    ]
    install(tools, wheels, SAFE)
    assert log[-1] == "install x86-64-avx2"


def test_a_build_killed_by_a_signal_is_named_rebuilt_safe_and_checked_again(
    tmp_path: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real smoke child, made to die as a bad build does; the safe 'rebuild' lifts the fault."""
    bundle_dir = gguf.parents[1]
    log: list[str] = []
    monkeypatch.setenv(FAULT_ENV, "SIGSEGV")
    tools = _tools(tmp_path, log)
    wheels = tmp_path / "wheels"
    install(tools, wheels)
    assert tools.install is not None
    plain_install = tools.install

    def install_and_heal(cached: wheel_mod.CachedWheel) -> None:
        plain_install(cached)
        if cached.profile.name == "x86-64-avx2":
            monkeypatch.delenv(FAULT_ENV)

    tools.install = install_and_heal
    result = check(tools, wheels, bundle_dir)
    assert result.ok
    line = next(entry for entry in log if entry.startswith("error: llama.cpp"))
    assert "died on SIGSEGV" in line and "llama-cpp-python 0.3.36" in line
    assert "-DGGML_AVX512=ON" in line and "rebuilding once with the safe profile" in line
    assert log[-3:-1] == ["build x86-64-avx2", "install x86-64-avx2"]
    assert log[-1].startswith("llama.cpp runs here with x86-64-avx2")
    # The next set-up goes straight to the safe profile instead of reinstalling the crashing build.
    assert chosen_profile(tools, wheels).name == "x86-64-avx2"


def test_a_safe_build_that_crashes_too_stops_the_setup_with_the_fix(tmp_path: Path, gguf: Path) -> None:
    log: list[str] = []
    crash = SmokeResult(False, "the smoke decode of x.gguf died on SIGILL", signal_name="SIGILL")
    tools = _tools(tmp_path, log, smoke=lambda _model: crash)
    wheels = tmp_path / "wheels"
    install(tools, wheels)
    with pytest.raises(SetupFailed, match="even with profile x86-64-avx2") as failure:
        check(tools, wheels, gguf.parents[1])
    assert "Fix:" in str(failure.value) and "dmesg" in str(failure.value)


def test_a_failure_that_is_not_a_crash_is_reported_without_a_rebuild(tmp_path: Path, gguf: Path) -> None:
    log: list[str] = []
    failed = SmokeResult(False, "the smoke decode of x.gguf failed: ModelFileError")
    tools = _tools(tmp_path, log, smoke=lambda _model: failed)
    with pytest.raises(SetupFailed, match="ModelFileError"):
        check(tools, tmp_path / "wheels", gguf.parents[1])
    assert not [entry for entry in log if entry.startswith("build")]
