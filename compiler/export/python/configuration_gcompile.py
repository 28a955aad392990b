"""Configuration of a gcompile model exported with `gcompile export` (written by gcompile).

The fields mirror the spec's [model] and [moe] sections (docs/spec.md); the
forward scales are the float32 values the trained binary used.
"""

from transformers import PretrainedConfig


class GcompileConfig(PretrainedConfig):
    model_type = "gcompile"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=32000,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=None,
        head_dim=None,
        intermediate_size=1536,
        hidden_act="silu",
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        norm_placement="pre",
        embedding_norm=False,
        qk_norm=False,
        gated_attention="none",
        embedding_scale=1.0,
        attn_scale=None,
        logit_scale=1.0,
        moe_layers=None,
        num_experts=0,
        num_experts_per_tok=0,
        num_shared_experts=0,
        moe_intermediate_size=0,
        shared_intermediate_size=0,
        router_scoring="softmax",
        norm_topk_prob=False,
        selection_bias=False,
        tie_word_embeddings=False,
        initializer_range=0.02,
        use_cache=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        if norm_placement not in ("pre", "sandwich"):
            raise ValueError(f"norm_placement must be 'pre' or 'sandwich', not {norm_placement!r}")
        if gated_attention not in ("none", "headwise", "elementwise"):
            raise ValueError(f"gated_attention must be none, headwise or elementwise, not {gated_attention!r}")
        if router_scoring not in ("softmax", "sigmoid"):
            raise ValueError(f"router_scoring must be softmax or sigmoid, not {router_scoring!r}")
        self.norm_placement = norm_placement
        self.embedding_norm = embedding_norm
        self.qk_norm = qk_norm
        self.gated_attention = gated_attention
        self.embedding_scale = embedding_scale
        self.attn_scale = attn_scale if attn_scale is not None else self.head_dim ** -0.5
        self.logit_scale = logit_scale
        self.moe_layers = list(moe_layers or [])
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.num_shared_experts = num_shared_experts
        self.moe_intermediate_size = moe_intermediate_size
        self.shared_intermediate_size = shared_intermediate_size
        self.router_scoring = router_scoring
        self.norm_topk_prob = norm_topk_prob
        self.selection_bias = selection_bias
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
