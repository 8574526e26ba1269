"""ragserve: an LLM serving engine with a permission-aware RAG pipeline."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragserve.engine.outputs import CompletionOutput, RequestOutput
    from ragserve.engine.sampling_params import SamplingParams
    from ragserve.llm import LLM

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The engine's names, imported when first asked for: importing the package (the command
    line, the RAG services) does not load the engine (torch, transformers)."""
    if name == "LLM":
        from ragserve.llm import LLM as value
    elif name in ("CompletionOutput", "RequestOutput"):
        from ragserve.engine import outputs

        value = getattr(outputs, name)
    elif name == "SamplingParams":
        from ragserve.engine.sampling_params import SamplingParams as value
    else:
        raise AttributeError(f"module 'ragserve' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
