"""The inference engine: model, paged KV cache, scheduler, sampler, runner."""
