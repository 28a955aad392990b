#!/usr/bin/env python3
"""compiler/export/python/gcompile_decoder.py, the one PyTorch definition of the model, through its
three users' doors, without gcompile or a tree: its modules hold exactly the plan's tensors; the
modules (the bench's and the export's way) compute what the functions over a mapping of tensors (the
oracle's way) compute, and call every submodule that holds a tensor (what offload, device maps,
adapters and quantized linears hook); the bench's execution (SDPA, grouped experts, torch.topk)
changes nothing; and the export's wrapper, imported as transformers imports it, gives left-padded
sequences the logits they have alone and runs under accelerate's CPU offload.

    .venv/bin/python tests/export/decoder_test.py
"""

import copy
import importlib.util
import sys
import unittest
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / "compiler" / "export" / "python"
sys.path.insert(0, str(PYTHON))
sys.path.insert(0, str(ROOT / "bench"))
import gcompile_decoder as gd  # noqa: E402


def hf_package():
    """compiler/export/python as the package transformers makes of an export (relative imports)."""
    spec = importlib.util.spec_from_file_location("gcompile_hf", PYTHON / "__init__.py",
                                                  submodule_search_locations=[str(PYTHON)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["gcompile_hf"] = package
    import gcompile_hf.modeling_gcompile as modeling  # noqa: E402
    import gcompile_hf.configuration_gcompile as configuration  # noqa: E402
    return modeling, configuration


def every_feature(tied=False, scoring="sigmoid"):
    """A shape with every feature: GQA, QK-norm, sandwich, embedding norm, elementwise gate,
    forward scales, a dense first layer, MoE layers with a shared expert and every balancing loss."""
    moe = gd.MoeShape(layers=gd.moe_layer_indices(3, 1, 1), n_experts=5, top_k=2, expert_d_ff=8, shared_d_ff=6,
                      router_scoring=scoring, norm_topk_prob=True, load_balance="aux_loss", load_balance_coef=0.02,
                      seq_aux_loss=0.01, z_loss=0.001)
    return gd.DecoderShape(vocab_size=37, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=4, d_ff=20,
                           norm_eps=1e-5, norm_placement="sandwich", embedding_norm=True, qk_norm=True,
                           tie_embeddings=tied, gated_attention="elementwise", rope_theta=500.0, embedding_scale=1.5,
                           attn_scale=0.4, logit_scale=0.7, moe=moe)


def randomize(module, seed=0):
    """Random parameters (gains near 1) and buffers (the selection biases), never zeros."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
        for name, b in module.named_buffers():
            if name.endswith("selection_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)


def holders_called(model, run):
    """The names of the modules holding a parameter or buffer of their own that run() leaves uncalled."""
    called, handles = set(), []
    for name, m in model.named_modules():
        if any(True for _ in m.parameters(recurse=False)) or any(True for _ in m.buffers(recurse=False)):
            handles.append(m.register_forward_hook(lambda mod, args, out, name=name: called.add(name)))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return sorted(n for n, m in model.named_modules() if (any(True for _ in m.parameters(recurse=False)) or any(
        True for _ in m.buffers(recurse=False))) and n not in called)


class Adapter(torch.nn.Module):
    """A LoRA-shaped wrapper of a linear layer (its update zero): base_layer(x) + B(A(x))."""

    def __init__(self, base):
        super().__init__()
        self.base_layer = base
        self.lora_a = torch.nn.Linear(base.in_features, 2, bias=False)
        self.lora_b = torch.nn.Linear(2, base.out_features, bias=False)
        torch.nn.init.zeros_(self.lora_b.weight)

    def forward(self, x):
        return self.base_layer(x) + self.lora_b(self.lora_a(x))


def rel(a, b):
    return float((a - b).detach().norm() / b.detach().norm())


class SharedModel(unittest.TestCase):
    def test_parameter_shapes_are_the_layer_by_layer_tensors(self):
        shapes = gd.parameter_shapes(every_feature(tied=True))
        self.assertNotIn("lm_head.weight", shapes)  # tied: the embedding is the head
        self.assertEqual(shapes["model.layers.0.mlp.gate_proj.weight"], (20, 16))  # layer 0 is dense
        self.assertEqual(shapes["model.layers.1.mlp.experts.down_proj.weight"], (5, 16, 8))
        self.assertEqual(shapes["model.layers.2.self_attn.gate_proj.weight"], (16, 16))  # elementwise: H hd
        self.assertEqual(shapes["model.layers.2.mlp.out_norm.weight"], (16,))  # sandwich on an MoE layer
        self.assertNotIn("model.layers.1.mlp.router.selection_bias", shapes)

    def test_modules_compute_what_the_functions_compute(self):
        for tied, scoring in ((False, "sigmoid"), (True, "softmax")):
            shape = every_feature(tied, scoring)
            model = gd.Decoder(shape)
            randomize(model)
            tokens = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(1))
            targets = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(2))
            loss = model(tokens, targets)
            z, aux = gd.forward(shape, gd.tensors_of(model), tokens)
            self.assertIsNotNone(aux)
            self.assertGreater(float(aux.detach()), 0.0)
            self.assertEqual(float(loss), float(gd.training_loss(z, targets, aux)))

    def test_modules_call_every_holder_of_a_tensor(self):
        shape = every_feature()
        model = gd.Decoder(shape)
        randomize(model)
        tokens = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(8))
        self.assertEqual(holders_called(model, lambda: model(tokens, tokens)), [])

    def test_the_bench_execution_changes_nothing(self):
        import torch_moe

        sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        shape = every_feature()
        plain = gd.Decoder(shape)
        randomize(plain, seed=3)
        fast = gd.Decoder(shape, gd.Execution(sdpa=sdpa, experts=torch_moe.grouped_experts(torch), exact_ties=False),
                          rope_cache=16)
        fast.load_state_dict(plain.state_dict())
        tokens = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(4))
        a, b = plain(tokens, tokens), fast(tokens, tokens)
        self.assertLess(abs(float(a) - float(b)), 1e-5 * abs(float(a)))
        a.backward()
        b.backward()
        fast_grads = dict(fast.named_parameters())
        for name, p in plain.named_parameters():
            self.assertLess(rel(fast_grads[name].grad, p.grad), 1e-4, name)


class ExportWrapper(unittest.TestCase):
    def test_left_padding_and_positions_give_each_sequence_its_own_logits(self):
        try:
            modeling, configuration = hf_package()
        except ImportError as e:
            self.skipTest(f"transformers is not importable: {e}")
        config = configuration.GcompileConfig(
            vocab_size=37, hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=4, intermediate_size=20, norm_placement="sandwich", embedding_norm=True, qk_norm=True,
            gated_attention="headwise", embedding_scale=1.5, attn_scale=0.4, logit_scale=0.7, moe_layers=[1, 2],
            num_experts=5, num_experts_per_tok=2, num_shared_experts=1, moe_intermediate_size=8,
            shared_intermediate_size=6, router_scoring="sigmoid", norm_topk_prob=True, selection_bias=True)
        model = modeling.GcompileForCausalLM(config).eval()
        randomize(model, seed=5)
        short = torch.randint(0, 37, (1, 5), generator=torch.Generator().manual_seed(6))
        long = torch.randint(0, 37, (1, 8), generator=torch.Generator().manual_seed(7))
        batch = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], dim=1), long])
        mask = torch.ones(2, 8, dtype=torch.long)
        mask[0, :3] = 0
        inputs = model.prepare_inputs_for_generation(batch, attention_mask=mask)
        with torch.no_grad():
            together = model(**inputs).logits
            alone = model(short).logits
            full = model(long).logits
        self.assertLess(rel(together[0, 3:], alone[0]), 1e-5)
        self.assertLess(rel(together[1], full[0]), 1e-5)
        self.assertEqual(holders_called(model, lambda: model(long)), [])
        # An adapter on every linear layer (PEFT's "all-linear" wraps them so; a quantizer replaces
        # them): the router is no nn.Linear, so it keeps its logits-and-bias contract.
        wrapped = copy.deepcopy(model)
        linears = [name for name, m in wrapped.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"]
        self.assertFalse(any(name.endswith("mlp.router") for name in linears))
        for name in linears:
            parent, _, child = name.rpartition(".")
            owner = wrapped.get_submodule(parent)
            setattr(owner, child, Adapter(getattr(owner, child)))
        with torch.no_grad():
            self.assertLess(rel(wrapped(long).logits, full), 1e-6)
        # The wrapper's model is the shared one: its tensors through gd.forward give its logits.
        tensors = {name: t for name, t in gd.tensors_of(model).items()}
        tensors.setdefault("lm_head.weight", model.lm_head.weight)
        z, _ = gd.forward(model.model.decoder_shape, tensors, long)
        self.assertLess(rel(full, z), 1e-6)
        try:
            import accelerate
        except ImportError:
            return
        # Offloaded, a module's tensors exist only while it runs (the weights live on the meta device).
        accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
        with torch.no_grad():
            offloaded = model(long).logits
        self.assertLess(rel(offloaded, full), 1e-6)


if __name__ == "__main__":
    unittest.main()
