"""ragserve: an LLM serving engine with a permission-aware RAG pipeline."""

from ragserve.engine.outputs import CompletionOutput, RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.llm import LLM

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"
