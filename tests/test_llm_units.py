"""The LLM engine's pure parts: stop strings, history trimming, chat templates, the GGUF reader
(on the real bundle files and on damaged copies of them)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from engines.bundle import Bundle
from engines.errors import InputError, ModelFileError
from engines.llm import Message
from engines.llm.chat_template import GEMMA_TEMPLATE, ChatTemplate, validate_history
from engines.llm.gguf import read_gguf
from engines.llm.history import trim_history
from engines.llm.stop import StopStringFilter


def _stream(filter_: StopStringFilter, pieces: Sequence[str]) -> str:
    out = "".join(filter_.push(p) for p in pieces)
    return out + filter_.flush()


def test_stop_string_split_over_pieces_ends_the_text_before_it() -> None:
    stops = StopStringFilter(["\n\n"])
    assert _stream(stops, ["Hello", " there.", "\n", "\nNext", " paragraph"]) == "Hello there."
    assert stops.stopped


def test_a_lone_newline_is_held_back_then_released() -> None:
    stops = StopStringFilter(["\n\n"])
    assert stops.push("one\n") == "one"
    assert stops.push("two") == "\ntwo"
    assert not stops.stopped
    assert stops.flush() == ""


def test_earliest_of_several_stop_strings_wins() -> None:
    stops = StopStringFilter(["User:", "\n\n"])
    assert _stream(stops, ["Sure.\n\nUser: hi"]) == "Sure."


def test_no_stop_strings_passes_everything() -> None:
    assert _stream(StopStringFilter([]), ["a", "b\n\n", "c"]) == "ab\n\nc"


def _conversation(turns: int) -> list[Message]:
    history: list[Message] = []
    for n in range(turns):
        history += [Message("user", f"question {n}"), Message("assistant", f"answer {n}")]
    return [*history, Message("user", "last question")]


def test_trimming_drops_whole_turns_oldest_first() -> None:
    history = _conversation(5)
    kept, dropped = trim_history(history, lambda messages: len(messages) <= 4)
    assert dropped == 8
    assert kept == history[8:]
    assert kept[0].role == "user" and kept[-1].content == "last question"


def test_trimming_keeps_a_history_that_fits() -> None:
    history = _conversation(2)
    assert trim_history(history, lambda messages: True) == (history, 0)


def test_a_last_message_too_long_for_the_window_is_an_input_error() -> None:
    with pytest.raises(InputError, match="context_tokens"):
        trim_history(_conversation(2), lambda messages: False)


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([], "empty"),
        ([Message("system", "x"), Message("user", "hi")], "system prompt"),
        ([Message("assistant", "hello"), Message("user", "hi")], "start with a user"),
        ([Message("user", "hi"), Message("assistant", "hello")], "end with a user"),
    ],
)
def test_invalid_histories_are_refused_with_the_fix(history: list[Message], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        validate_history(history)


def test_gemma_fallback_renders_gemmas_turn_format() -> None:
    template = ChatTemplate(GEMMA_TEMPLATE, "fallback:gemma3", bos_token="<bos>")
    history = [Message("user", "Hi"), Message("assistant", " Hello! "), Message("user", "Bye")]
    prefix, rest = template.split("Be brief.", history)
    assert prefix == "<bos><start_of_turn>user\nBe brief.\n\n"
    assert rest == (
        "Hi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    )


def test_gguf_template_is_used_and_the_system_prefix_is_conversation_independent(bundle: Bundle) -> None:
    info = read_gguf(bundle.path("llm/qwen-1.5b"))
    assert info.chat_template
    template = ChatTemplate.for_model(info.chat_template, info.architecture, bos_token="", eos_token="")
    assert template.origin == "gguf"
    prefix_a, rest_a = template.split("Be brief.", [Message("user", "Hi")])
    prefix_b, _ = template.split("Be brief.", _conversation(3))
    assert prefix_a == prefix_b
    assert prefix_a.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert rest_a.endswith("Hi<|im_end|>\n<|im_start|>assistant\n")


def test_model_without_template_or_fallback_is_a_model_file_error() -> None:
    with pytest.raises(ModelFileError, match="chat template"):
        ChatTemplate.for_model(None, "mamba", bos_token="", eos_token="")


@pytest.mark.parametrize(
    ("name", "architecture", "has_template"),
    [("llm/gemma-270m", "gemma3", False), ("llm/qwen-1.5b", "qwen2", True)],
)
def test_gguf_reader_on_the_bundle_models(
    bundle: Bundle, name: str, architecture: str, has_template: bool
) -> None:
    info = read_gguf(bundle.path(name))
    assert info.architecture == architecture
    assert info.file_type_name == "Q4_K_M"
    assert info.context_length == 32768
    assert bool(info.chat_template) is has_template
    assert info.required_size_bytes == info.file_size_bytes  # the tensor table accounts for every byte


def test_a_file_that_is_not_a_gguf_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 this is a zip, not a model" * 10)
    with pytest.raises(ModelFileError, match=r"not a GGUF model file.*starts with b'PK"):
        read_gguf(fake)


@pytest.mark.parametrize("keep_bytes", [100, 5_000_000])
def test_a_truncated_gguf_is_named(bundle: Bundle, tmp_path: Path, keep_bytes: int) -> None:
    cut = tmp_path / "cut.gguf"
    with bundle.path("llm/gemma-270m").open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(keep_bytes))
    with pytest.raises(ModelFileError, match="truncated"):
        read_gguf(cut)


def test_a_missing_model_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        read_gguf(tmp_path / "absent.gguf")


def test_an_intact_copy_reads_the_same(bundle: Bundle, tmp_path: Path) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(bundle.path("llm/gemma-270m"), copy)
    assert read_gguf(copy).metadata == read_gguf(bundle.path("llm/gemma-270m")).metadata
