"""A gcompile model for `transformers` (written by `gcompile export`; load with trust_remote_code=True).

The Llama-style decoder gcompile trains, with the features plain Llama lacks:
gated attention (headwise or elementwise sigmoid gate on the attention output),
an RMSNorm on the embeddings, QK-norm, sandwich norms, forward scales, and
mixture-of-experts layers (softmax or sigmoid router, top-k, optional
renormalization, aux_free selection biases, shared experts). Tensor names are
the training checkpoint's. The model itself is gcompile_decoder.py beside this file
(the PyTorch definition gcompile's bench and tests share), whose modules are called
one by one (so offload, device maps, adapters and quantized linears see them); this
file wraps it for transformers. torch and transformers only.

    h = embedding_scale * E[ids];  h = RMSNorm(h) if embedding_norm
    per layer:  a = RMSNorm(h);  o = gate * Attention(a);  h = h + [RMSNorm](o Wo^T)
                b = RMSNorm(h);  h = h + [RMSNorm](MLP(b))      ([.]: sandwich only)
    logits = logit_scale * RMSNorm(h) W_lm^T

No key/value cache: generation recomputes the prefix each step (fine for
evaluation; lm-evaluation-harness scores log-likelihoods in one pass).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

# Written as `from .module import names`, the form transformers copies beside this file for trust_remote_code.
from .gcompile_decoder import (DecoderShape, MoeShape, add_body, body_forward, padded_causal_mask, rope_tables,
                               scaled_logits)
from .configuration_gcompile import GcompileConfig


def decoder_shape(c):
    """The model's shape for gcompile_decoder (the shared PyTorch model) from the configuration."""
    moe = None
    if c.moe_layers:  # inference routes dropless and adds no balancing loss
        moe = MoeShape(layers=frozenset(c.moe_layers), n_experts=c.num_experts, top_k=c.num_experts_per_tok,
                          expert_d_ff=c.moe_intermediate_size,
                          shared_d_ff=c.num_shared_experts * c.shared_intermediate_size,
                          router_scoring=c.router_scoring, norm_topk_prob=c.norm_topk_prob,
                          selection_bias=c.selection_bias)
    return DecoderShape(vocab_size=c.vocab_size, d_model=c.hidden_size, n_layers=c.num_hidden_layers,
                           n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
                           d_ff=c.intermediate_size, norm_eps=c.rms_norm_eps, norm_placement=c.norm_placement,
                           embedding_norm=c.embedding_norm, qk_norm=c.qk_norm,
                           tie_embeddings=c.tie_word_embeddings, gated_attention=c.gated_attention,
                           rope_theta=c.rope_theta, embedding_scale=c.embedding_scale, attn_scale=c.attn_scale,
                           logit_scale=c.logit_scale, moe=moe)


class GcompilePreTrainedModel(PreTrainedModel):
    config_class = GcompileConfig
    base_model_prefix = "model"
    _no_split_modules = ["DecoderLayer"]

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)


class GcompileModel(GcompilePreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.decoder_shape = decoder_shape(config)
        add_body(self, self.decoder_shape)  # embed_tokens, embed_norm, layers, norm
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        dtype = self.embed_tokens.weight.dtype
        cos_sin = rope_tables(position_ids, self.decoder_shape.head_dim, self.decoder_shape.rope_theta, dtype)
        mask = None if attention_mask is None else padded_causal_mask(attention_mask, T)
        h, _ = body_forward(self, self.decoder_shape, input_ids, cos_sin, mask)  # inference: balancing losses unused
        return h


class GcompileForCausalLM(GcompilePreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # transformers 5: target -> source

    def __init__(self, config):
        super().__init__(config)
        self.model = GcompileModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, labels=None, return_dict=None,
                **kwargs):
        h = self.model(input_ids, attention_mask, position_ids)
        logits = scaled_logits(self.model.decoder_shape, self.lm_head(h))  # float32 at least
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        position_ids = None
        if attention_mask is not None:  # left padding: positions count real tokens only
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
