"""Qwen2: the Llama decoder with biases on its q/k/v projections (always, whatever the
config's attention_bias says)."""

from ragserve.engine.models.llama import LlamaModel


class Qwen2Model(LlamaModel):
    QKV_BIAS = True
