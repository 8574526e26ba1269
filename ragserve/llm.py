"""The offline API, in the vLLM convention: LLM(model=...).generate(prompts, params)."""

from collections.abc import Sequence as Seq
from typing import Any

from rich.progress import Progress

from ragserve.engine.config import DEFAULT_MODEL, EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams

Prompt = str | dict[str, Any]
Message = dict[str, str]


class LLM:
    def __init__(
        self, model: str = DEFAULT_MODEL, dtype: str = EngineConfig.dtype, **engine_args: Any
    ):
        self.engine = LLMEngine(EngineConfig(model=model, dtype=dtype, **engine_args))

    def get_tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Seq[Prompt],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Generate for each prompt: a string, or {"prompt_token_ids": [...]}."""
        if isinstance(prompts, str | dict):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError("give one SamplingParams, or one per prompt")
        order = []
        for prompt, params in zip(prompts, sampling_params, strict=True):
            tokens = prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt
            order.append(self.engine.add_request(tokens, params))
        return self._run(order, use_tqdm)

    def chat(
        self,
        messages: list[Message] | list[list[Message]],
        sampling_params: SamplingParams | None = None,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Apply the model's chat template to each conversation and generate a reply."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [self.apply_chat_template(c) for c in conversations]
        return self.generate(prompts, sampling_params, use_tqdm)

    def apply_chat_template(self, messages: list[Message]) -> str:
        return self.engine.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def _run(self, order: list[str], use_tqdm: bool) -> list[RequestOutput]:
        finished: dict[str, RequestOutput] = {}
        with Progress(disable=not use_tqdm, transient=True) as progress:
            task = progress.add_task("generating", total=len(order))
            while self.engine.has_unfinished_requests():
                for output in self.engine.step():
                    if output.finished:
                        finished[output.request_id] = output
                        progress.advance(task)
        return [finished[r] for r in order]
