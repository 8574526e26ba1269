"""The engine: takes requests, runs scheduler steps, returns outputs.

add_request and abort_request may be called from any thread; they hand work to the step loop
through a locked inbox, so the scheduler and KV cache are only ever touched by step().
"""

import functools
import itertools
import json
import logging
import threading
import time
from dataclasses import replace

import torch
from transformers import AutoConfig, AutoTokenizer

from ragserve.engine import kernels
from ragserve.engine.block_manager import BlockManager
from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.config import EngineConfig, size_kv_cache
from ragserve.engine.detokenizer import IncrementalDetokenizer
from ragserve.engine.ending import EndingWatch
from ragserve.engine.errors import EngineOverloadedError, InvalidRequestError, check_token_ids
from ragserve.engine.kv_cache import DTYPES, KVCache
from ragserve.engine.loader import load_model, resolve_model
from ragserve.engine.logits_processor import LogitsProcessor
from ragserve.engine.models import spec_of
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.request_state import Choice, RequestState
from ragserve.engine.runner import ModelRunner
from ragserve.engine.sampler import Sampler
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.scheduler import Scheduler
from ragserve.engine.sequence import Sequence, SequenceStatus
from ragserve.engine.stats import EngineStats, StepTimes
from ragserve.engine.structured import Grammars

logger = logging.getLogger(__name__)


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._stepping_thread: int | None = None
        # Loading runs on one thread: a thread that forms an OpenMP team keeps it for life, and
        # the thread that builds the engine need not be the one that steps it (see step()).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self._load(config)
        finally:
            torch.set_num_threads(threads)

    def _load(self, config: EngineConfig) -> None:
        self.model_path = resolve_model(config.model)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        dtype = DTYPES[config.dtype]
        hf_config = AutoConfig.from_pretrained(self.model_path)
        spec = spec_of(hf_config)
        sizing = size_kv_cache(config, spec)
        num_blocks = sizing.num_blocks
        kv_dtype = torch.int8 if config.kv_cache_dtype == "int8" else dtype
        shape = (spec.num_layers, spec.num_kv_heads, spec.head_dim, num_blocks, config.block_size)
        self.kv_cache = KVCache(*shape, kv_dtype)
        logger.info(
            "KV cache: %d blocks of %d tokens = %d tokens, %.1f MiB (%d bytes/token, %s)",
            num_blocks,
            config.block_size,
            self.kv_cache.num_tokens,
            self.kv_cache.nbytes / 2**20,
            sizing.bytes_per_token,
            kv_dtype,
        )
        self.max_model_len = sizing.max_model_len
        self.model = load_model(
            self.model_path, hf_config, dtype, self.max_model_len, config.quantization
        )
        # Built (once per machine, about a minute) at start-up rather than in the first request.
        kernels.extension()
        self.block_manager = BlockManager(
            num_blocks, config.block_size, config.enable_prefix_caching
        )
        self.scheduler = Scheduler(config, self.block_manager)
        self.eos_token_ids = self._eos_token_ids()
        self.runner = ModelRunner(
            self.model, self.kv_cache, Sampler(config.seed), LogitsProcessor(self.eos_token_ids)
        )
        self._requests: dict[str, RequestState] = {}
        self._inbox: list[Sequence] = []
        self._aborts: set[str] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self.step_times = StepTimes()
        self.num_closed_early = 0

    @functools.cached_property
    def grammars(self) -> Grammars:
        """Built on the first constrained request (reading the vocabulary takes ~1 s)."""
        return Grammars(self.tokenizer, self.model.spec.vocab_size, self.eos_token_ids)

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
            self.check_token_ids(token_ids)
        if not token_ids:
            raise InvalidRequestError("the prompt is empty")
        for name, ids in (
            ("logit_bias", params.logit_bias or {}),
            ("stop_token_ids", params.stop_token_ids or []),
        ):
            if any(t >= vocab for t in ids):
                raise InvalidRequestError(f"{name} token ids must lie in [0, {vocab})")
        max_tokens = self._max_tokens(len(token_ids), params)
        if params.constraint is not None:
            self.grammars.compile(params.constraint)  # a bad one is refused here
        if self.config.batch_invariant and not params.batch_invariant:
            params = replace(params, batch_invariant=True)
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
            if params.constraint is not None:
                seq.matcher = self.grammars.matcher(params.constraint)
                seq.ending = EndingWatch(review_at=max_tokens)
                self._review_ending(seq)
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
            choices.append(Choice(seq, detokenizer))
        held = [choice.seq for choice in choices[1:]]
        with self._lock:
            if request_id in self._requests:
                raise InvalidRequestError(f"request id {request_id!r} is already in use")
            self._check_queue(len(token_ids))
            self._requests[request_id] = RequestState(text, choices, held)
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

    def check_token_ids(self, token_ids: list[int]) -> None:
        check_token_ids(token_ids, self.model.spec.vocab_size)

    def has_unfinished_requests(self) -> bool:
        with self._lock:
            return bool(self._requests)

    def step(self) -> list[RequestOutput]:
        if self._stepping_thread != threading.get_ident():
            # OpenMP thread counts are per thread; the stepping thread gets the configured one.
            torch.set_num_threads(self.config.threads)
            self._stepping_thread = threading.get_ident()
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
        touched: dict[str, RequestState] = {}
        for seq, tokens in sampled.items():
            request = self._requests[seq.request_id]
            if request.held:  # the prompt is computed: the other choices can reuse its blocks
                for held in request.held:
                    self.scheduler.add(held)
                request.held = []
            if seq.first_token_time is None:
                seq.first_token_time = now
            self._take_tokens(seq, tokens, request.choices[seq.index].detokenizer)
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
            # Moved under the lock: admission (_check_queue) must never see a request in
            # neither the inbox nor the waiting queue, or it would admit one too many.
            for seq in self._inbox:
                self.scheduler.add(seq)
            self._inbox = []
            aborts, self._aborts = self._aborts, set()
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

    def _take_tokens(
        self, seq: Sequence, tokens: list[int], detokenizer: IncrementalDetokenizer
    ) -> None:
        """Detokenize the step's new tokens (already appended to seq) one by one; a stop ends
        the sequence there, dropping the tokens a verified draft had accepted after it."""
        first = seq.num_tokens - len(tokens)
        for position, token in enumerate(tokens, start=first):
            # Counted as if the tokens arrived one per step, as they would without a draft.
            num_output = position + 1 - seq.num_prompt_tokens
            stop_token = self._is_stop_token(seq.params, token)
            if seq.matcher is not None:
                seq.matcher.consume_token(token)
            # A stop token's text is not part of the output unless asked for, as in vLLM.
            if not stop_token or seq.params.include_stop_str_in_output:
                detokenizer.add(token, num_output >= seq.params.min_tokens)
            # Nothing can follow a complete match: done without another step for EOS.
            matched = seq.matcher is not None and seq.matcher.is_stopped()
            if stop_token or matched:
                reason: str | None = "stop"
            else:
                reason = self._finish_reason(seq, num_output, detokenizer)
            if reason is not None:
                del seq.token_ids[position + 1 :]
                self.scheduler.finish(seq, reason)
                return
        self._review_ending(seq)

    def _review_ending(self, seq: Sequence) -> None:
        if seq.ending is not None and seq.matcher is not None:
            left = seq.max_tokens - seq.num_output_tokens
            self.num_closed_early += self.grammars.endings.review(seq.ending, seq.matcher, left)

    def _is_stop_token(self, params: SamplingParams, token: int) -> bool:
        if not params.ignore_eos and token in self.eos_token_ids:
            return True
        return token in (params.stop_token_ids or ())

    def _finish_reason(
        self, seq: Sequence, num_output: int, detokenizer: IncrementalDetokenizer
    ) -> str | None:
        if detokenizer.stopped_by is not None:
            return "stop"
        if num_output >= seq.max_tokens or seq.num_prompt_tokens + num_output >= self.max_model_len:
            return "length"
        return None

    def _output(self, request: RequestState) -> RequestOutput:
        if request.finished:
            with self._lock:
                self._requests.pop(request.choices[0].seq.request_id, None)
        return request.output(self.eos_token_ids)

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
            spec_decode_draft_tokens=self.scheduler.num_draft_tokens,
            spec_decode_accepted_tokens=self.scheduler.num_accepted_tokens,
            constrained_closed_early=self.num_closed_early,
        )
