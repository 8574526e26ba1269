"""The engine: takes requests, runs scheduler steps, returns outputs.

add_request and abort_request may be called from any thread; they hand work to the step loop
through a locked inbox, so the scheduler and KV cache are only ever touched by step().
"""

import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, fields, replace

import torch
from transformers import AutoConfig, AutoTokenizer

from ragserve.engine.block_manager import BlockManager
from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.config import EngineConfig
from ragserve.engine.detokenizer import IncrementalDetokenizer
from ragserve.engine.errors import EngineOverloadedError, InvalidRequestError
from ragserve.engine.kv_cache import DTYPES, KVCache, kv_bytes_per_token
from ragserve.engine.loader import resolve_model
from ragserve.engine.logits_processor import LogitsProcessor
from ragserve.engine.model import LlamaModel, ModelSpec
from ragserve.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from ragserve.engine.runner import ModelRunner
from ragserve.engine.sampler import Sampler
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.scheduler import Scheduler
from ragserve.engine.sequence import Sequence, SequenceStatus

logger = logging.getLogger(__name__)


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    num_queued_tokens: int
    kv_blocks_total: int
    kv_blocks_free: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int

    @property
    def kv_blocks_used(self) -> int:
        return self.kv_blocks_total - self.kv_blocks_free

    @property
    def kv_cache_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total


@dataclass
class StepTimes:
    """Seconds spent in each phase of step(), summed over steps."""

    steps: int = 0
    schedule_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0
    output_s: float = 0.0

    def copy(self) -> "StepTimes":
        return replace(self)

    def since(self, earlier: "StepTimes") -> "StepTimes":
        return StepTimes(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))


@dataclass
class _Choice:
    seq: Sequence
    detokenizer: IncrementalDetokenizer


@dataclass
class _Request:
    prompt: str | None
    choices: list[_Choice]
    # Choices 1..n-1 wait here until choice 0 has computed the prompt, so that they find its
    # full blocks in the prefix cache instead of computing the same prompt n times.
    held: list[Sequence]

    @property
    def finished(self) -> bool:
        return all(choice.seq.is_finished for choice in self.choices)


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        torch.set_num_threads(config.threads)
        self.model_path = resolve_model(config.model)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        dtype = DTYPES[config.dtype]
        hf_config = AutoConfig.from_pretrained(self.model_path)
        spec = ModelSpec.from_config(hf_config)
        per_token = kv_bytes_per_token(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype)
        num_blocks = config.kv_cache_memory_bytes // (per_token * config.block_size)
        if num_blocks < 1:
            raise ValueError(
                f"kv_cache_memory_bytes={config.kv_cache_memory_bytes} holds no block of "
                f"{config.block_size} tokens ({per_token} bytes per token)"
            )
        pool_tokens = num_blocks * config.block_size
        self.max_model_len = min(config.max_model_len or spec.max_position_embeddings, pool_tokens)
        self.model = LlamaModel.from_pretrained(
            self.model_path, hf_config, dtype, self.max_model_len
        )
        self.kv_cache = KVCache(
            spec.num_layers, spec.num_kv_heads, spec.head_dim, num_blocks, config.block_size, dtype
        )
        logger.info(
            "KV cache: %d blocks of %d tokens = %d tokens, %.1f MiB (%d bytes/token, %s); "
            "max_model_len %d",
            num_blocks,
            config.block_size,
            pool_tokens,
            self.kv_cache.nbytes / 2**20,
            per_token,
            config.dtype,
            self.max_model_len,
        )
        self.block_manager = BlockManager(
            num_blocks, config.block_size, config.enable_prefix_caching
        )
        self.scheduler = Scheduler(config, self.block_manager)
        self.eos_token_ids = self._eos_token_ids()
        self.runner = ModelRunner(
            self.model, self.kv_cache, Sampler(config.seed), LogitsProcessor(self.eos_token_ids)
        )
        self._requests: dict[str, _Request] = {}
        self._inbox: list[Sequence] = []
        self._aborts: set[str] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self.step_times = StepTimes()

    @property
    def model_id(self) -> str:
        return self.config.model

    def _eos_token_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id} - {None}
        generation_config = self.model_path / "generation_config.json"
        if generation_config.is_file():
            eos = json.loads(generation_config.read_text()).get("eos_token_id")
            ids |= set(eos if isinstance(eos, list) else [eos]) - {None}
        return ids

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        user: str = "default",
        cache_salt: str | CacheSalt = "",
        priority: int = 0,
    ) -> str:
        """Validate and queue a request; raises InvalidRequestError or EngineOverloadedError.
        A string cache_salt is the namespace of the whole prompt (see CacheSalt)."""
        vocab = self.model.spec.vocab_size
        if isinstance(prompt, str):
            text: str | None = prompt
            token_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            text, token_ids = None, list(prompt)
            if any(not 0 <= t < vocab for t in token_ids):
                raise InvalidRequestError(f"prompt token ids must lie in [0, {vocab})")
        if not token_ids:
            raise InvalidRequestError("the prompt is empty")
        if any(t >= vocab for t in (params.logit_bias or {})):
            raise InvalidRequestError(f"logit_bias token ids must lie in [0, {vocab})")
        max_tokens = self._max_tokens(len(token_ids), params)
        request_id = request_id or f"req-{next(self._ids)}"
        salt = CacheSalt(cache_salt) if isinstance(cache_salt, str) else cache_salt
        choices = []
        for index in range(params.n):
            seq = Sequence(
                request_id=request_id,
                prompt_token_ids=token_ids,
                params=params,
                max_tokens=max_tokens,
                user=user,
                cache_salt=salt,
                priority=priority,
                index=index,
            )
            if params.seed is not None:
                # Each choice its own stream of noise, reproducible from the request's seed.
                seq.generator = torch.Generator().manual_seed(params.seed + index)
            detokenizer = IncrementalDetokenizer(
                self.tokenizer,
                token_ids,
                params.stop_strings,
                params.skip_special_tokens,
                params.include_stop_str_in_output,
            )
            choices.append(_Choice(seq, detokenizer))
        held = [choice.seq for choice in choices[1:]]
        with self._lock:
            if request_id in self._requests:
                raise InvalidRequestError(f"request id {request_id!r} is already in use")
            self._check_queue(len(token_ids))
            self._requests[request_id] = _Request(text, choices, held)
            self._inbox.append(choices[0].seq)
        return request_id

    def _max_tokens(self, prompt_len: int, params: SamplingParams) -> int:
        limit = self.max_model_len
        if prompt_len >= limit:
            raise InvalidRequestError(
                f"the prompt has {prompt_len} tokens; this model serves at most {limit} tokens "
                "of prompt plus output (max_model_len)"
            )
        if params.max_tokens is None:
            return limit - prompt_len
        if prompt_len + params.max_tokens > limit:
            raise InvalidRequestError(
                f"prompt ({prompt_len} tokens) plus max_tokens ({params.max_tokens}) exceeds "
                f"max_model_len ({limit})"
            )
        return params.max_tokens

    def _check_queue(self, prompt_len: int) -> None:
        queued = len(self.scheduler.waiting) + len(self._inbox)
        if queued >= self.config.max_queued_requests:
            raise EngineOverloadedError(
                f"the queue is full ({queued} requests waiting, limit "
                f"{self.config.max_queued_requests})"
            )
        queued_tokens = self.scheduler.num_queued_tokens + sum(s.num_tokens for s in self._inbox)
        if queued_tokens + prompt_len > self.config.max_queued_tokens:
            raise EngineOverloadedError(
                f"the queue is full ({queued_tokens} prompt tokens waiting, limit "
                f"{self.config.max_queued_tokens})"
            )

    def abort_request(self, request_id: str) -> None:
        """Cancel a request; its KV blocks are freed at the next step boundary."""
        with self._lock:
            self._aborts.add(request_id)

    def has_unfinished_requests(self) -> bool:
        with self._lock:
            return bool(self._requests)

    def step(self) -> list[RequestOutput]:
        started = time.perf_counter()
        outputs = self._take_inbox()
        batch = self.scheduler.schedule()
        if not batch.seqs:
            return outputs
        scheduled = time.perf_counter()
        sampled, forward_s = self.runner.run(batch)
        ran = time.perf_counter()
        self.scheduler.postprocess(batch, sampled)
        now = time.monotonic()
        touched: dict[str, _Request] = {}
        for seq, token in sampled.items():
            request = self._requests[seq.request_id]
            if request.held:  # the prompt is computed: the other choices can reuse its blocks
                for held in request.held:
                    self.scheduler.add(held)
                request.held = []
            if seq.first_token_time is None:
                seq.first_token_time = now
            detokenizer = request.choices[seq.index].detokenizer
            stop_token = self._is_stop_token(seq.params, token)
            # A stop token's text is not part of the output unless asked for, as in vLLM.
            if not stop_token or seq.params.include_stop_str_in_output:
                detokenizer.add(token, seq.num_output_tokens >= seq.params.min_tokens)
            reason = "stop" if stop_token else self._finish_reason(seq, detokenizer)
            if reason is not None:
                self.scheduler.finish(seq, reason)
            touched[seq.request_id] = request
        outputs.extend(self._output(request) for request in touched.values())
        times = self.step_times
        times.steps += 1
        times.schedule_s += scheduled - started
        times.forward_s += forward_s
        times.sample_s += ran - scheduled - forward_s
        times.output_s += time.perf_counter() - ran
        return outputs

    def _take_inbox(self) -> list[RequestOutput]:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, set()
        for seq in inbox:
            self.scheduler.add(seq)
        outputs = []
        for request_id in aborts:
            request = self._requests.get(request_id)
            if request is None or request.finished:
                continue
            for held in request.held:
                held.status = SequenceStatus.FINISHED
                held.finish_reason = "abort"
            request.held = []
            for choice in request.choices:
                if not choice.seq.is_finished:
                    self.scheduler.finish(choice.seq, "abort")
            outputs.append(self._output(request))
        return outputs

    def _is_stop_token(self, params: SamplingParams, token: int) -> bool:
        if not params.ignore_eos and token in self.eos_token_ids:
            return True
        return token in (params.stop_token_ids or ())

    def _finish_reason(self, seq: Sequence, detokenizer: IncrementalDetokenizer) -> str | None:
        if detokenizer.stopped_by is not None:
            return "stop"
        if seq.num_output_tokens >= seq.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _output(self, request: _Request) -> RequestOutput:
        first = request.choices[0].seq
        finished = request.finished
        if finished:
            with self._lock:
                self._requests.pop(first.request_id, None)
        return RequestOutput(
            request_id=first.request_id,
            prompt=request.prompt,
            prompt_token_ids=first.prompt_token_ids,
            outputs=[self._completion(choice, finished) for choice in request.choices],
            finished=finished,
            num_cached_tokens=first.num_cached_tokens,
            metrics=RequestMetrics(
                arrival_time=first.arrival_time,
                first_scheduled_time=first.first_scheduled_time,
                first_token_time=first.first_token_time,
                finished_time=max(
                    (c.seq.finished_time for c in request.choices if c.seq.finished_time),
                    default=None,
                )
                if finished
                else None,
                num_preemptions=sum(c.seq.num_preemptions for c in request.choices),
            ),
        )

    def _completion(self, choice: _Choice, request_finished: bool) -> CompletionOutput:
        seq = choice.seq
        stop_reason: str | int | None = choice.detokenizer.stopped_by
        if stop_reason is None and seq.finish_reason == "stop" and seq.output_token_ids:
            last = seq.output_token_ids[-1]
            stop_reason = None if last in self.eos_token_ids else last
        return CompletionOutput(
            index=seq.index,
            text=choice.detokenizer.visible_text(seq.is_finished or request_finished),
            token_ids=list(seq.output_token_ids),
            finish_reason=seq.finish_reason,
            stop_reason=stop_reason,
            logprobs=list(seq.logprobs) if seq.params.logprobs else None,
        )

    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting) + len(self._inbox),
            num_queued_tokens=self.scheduler.num_queued_tokens,
            kv_blocks_total=bm.num_blocks,
            kv_blocks_free=bm.num_free_blocks,
            prefix_cache_queries=bm.prefix_cache_queries,
            prefix_cache_hits=bm.prefix_cache_hits,
            num_preemptions=self.scheduler.num_preemptions,
        )
