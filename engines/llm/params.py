"""The language model's settings: ``[llm]``, the model and how it answers, and ``[llm_server]``, a site
server's API."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from engines.params import Params


class LlmParams(Params):
    """The language model: the bundle's GGUF on this device (or a site server's, ``[llm_server]``), its
    threads, and how long a reply may be."""

    backend: Literal["local", "openai"] = Field(
        "local",
        description="local: the bundle's model on this device; openai: a site server's OpenAI-compatible "
        "API at llm_server.server_url (llama_cpp.server, llama-server, vLLM)",
    )
    model: str = Field(
        "qwen-1.5b",
        min_length=1,
        description="an llm/<model> GGUF in the bundle: gemma-270m | qwen-1.5b | one added with "
        "appliance bundle add-model",
    )
    gpu_layers: int = Field(0, ge=-1, description="layers on the GPU; -1 = all of them")
    context_tokens: int = Field(2048, ge=256, le=131072, description="KV cache per conversation")
    max_reply_tokens: int = Field(96, ge=1, le=4096, description="a reply is cut at this many tokens")
    temperature: float = Field(
        0.0,
        ge=0.0,
        le=2.0,
        description="sampling temperature; 0: greedy, the same question gets the same answer every time "
        "(above 0, answers vary between restarts unless a seed is fixed)",
    )
    threads: int = Field(2, ge=1, le=64, description="llama.cpp threads")
    yield_ms: int = Field(
        200,
        ge=0,
        le=2000,
        description="before each step, wait up to this long for Whisper, Smart Turn or Piper to finish "
        "what they are running (engines.cores: one after the other is faster than side by side on few "
        "cores); 0: never wait",
    )
    stop: tuple[str, ...] = Field(("\n\n",), description="a reply ends at any of these")
    max_queue: int = Field(
        0,
        ge=0,
        le=64,
        description="replies that may wait for a slot in silence; a reply that would wait behind this "
        "many says conversation.busy_reply first",
    )
    slots: int = Field(
        0,
        ge=0,
        le=64,
        description="conversations the LLM holds and answers at once, each with its own context_tokens "
        "of KV cache; 0: one per SIP call (sip.max_calls, when SIP is on) plus the local session",
    )


class LlmServerParams(Params):
    """With ``llm.backend = "openai"``: a site server's OpenAI-compatible API (llama_cpp.server,
    llama-server, vLLM)."""

    server_url: str = Field("", description='openai: the API\'s base, "http://10.20.0.5:8000/v1"')
    server_model: str = Field("", description="openai: the model name the server knows; empty: its own")
    allowed_hosts: tuple[str, ...] = Field(
        (), description="openai: the server's host (name, address or network); nothing else is reached"
    )
    allow_public_server: bool = Field(
        False, description="openai: allow a server outside the private address ranges"
    )
    server_api_key_file: Path | None = Field(None, description="openai: a file holding the server's API key")
    server_connect_timeout_s: float = Field(2.0, gt=0.0, le=60.0, description="openai: connecting")
    server_first_token_timeout_s: float = Field(
        8.0, gt=0.0, le=300.0, description="openai: the reply's first piece must arrive within this"
    )
    server_idle_timeout_s: float = Field(8.0, gt=0.0, le=300.0, description="openai: and each later one")
    server_fallback: Literal["local", "none"] = Field(
        "local",
        description="openai: local loads the bundle's model too and answers with it when the server cannot",
    )
    server_retry_s: float = Field(
        30.0, ge=0.0, le=3600.0, description="openai: after a failure, the local model answers this long"
    )
