#!/usr/bin/python3
"""A tiny random Qwen2-style checkpoint and PyTorch's logits for it: what the Llama runner reads beyond
tiny-llama, checked against the same plain-torch forward pass as the golden data.

    /usr/bin/python3 models/tiny-llama/tools/make_fixture.py

tiny-llama has no biases, a tied output projection, F16 weights, head_dim = hidden / heads and no window;
this checkpoint has all the other cases: BF16 weights, q/k/v biases, an untied lm_head, head_dim 16 with
hidden_size 48 and 4 heads (head_dim * heads != hidden_size), rope_theta 1e6, rms_norm_eps 1e-6, and a
sliding window of 8 on layer 1 only (use_sliding_window with max_window_layers 1). Random weights (seed 31),
scaled so that the logits spread over several units.

Writes models/tiny-llama/golden/qwen2-fixture/: config.json, model.safetensors (BF16), logits.f32
(float32 little-endian, (S, vocab): every position of the prompt, one full causal pass, f32 K/V) and
index.json (the prompt and the shape).
"""
import importlib.util
import json
import os

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.dirname(TOOLS)  # the model's folder: config.json, model.safetensors, golden/


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


golden = _load("tiny_llama_make_golden", os.path.join(TOOLS, "make_golden.py"))
gpt_train = _load("tiny_gpt_train", os.path.join(MODEL_DIR, "..", "tiny-gpt", "tools", "train.py"))  # the safetensors writer

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 256, "hidden_size": 48,
    "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": False, "sliding_window": 8,
    "use_sliding_window": True, "max_window_layers": 1, "torch_dtype": "bfloat16",
}
# 40 bytes: longer than the window, so layer 1 hides keys that layer 0 sees
PROMPT = "Then answered the shepherds of the hill,"


def random_weights(cfg, generator):
    D, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, Hkv, Dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def normal(*shape, std):
        return torch.randn(*shape, generator=generator) * std

    w = {"model.embed_tokens.weight": normal(V, D, std=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = 1 + normal(D, std=0.2)
        for proj, width in (("q", H * Dh), ("k", Hkv * Dh), ("v", Hkv * Dh)):
            w[p + "self_attn.%s_proj.weight" % proj] = normal(width, D, std=D ** -0.5)
            w[p + "self_attn.%s_proj.bias" % proj] = normal(width, std=0.5)
        w[p + "self_attn.o_proj.weight"] = normal(D, H * Dh, std=(H * Dh) ** -0.5)
        w[p + "post_attention_layernorm.weight"] = 1 + normal(D, std=0.2)
        w[p + "mlp.gate_proj.weight"] = normal(I, D, std=D ** -0.5)
        w[p + "mlp.up_proj.weight"] = normal(I, D, std=D ** -0.5)
        w[p + "mlp.down_proj.weight"] = normal(D, I, std=I ** -0.5)
    w["model.norm.weight"] = 1 + normal(D, std=0.2)
    w["lm_head.weight"] = normal(V, D, std=D ** -0.5 * 3)
    return w


@torch.no_grad()
def main():
    torch.set_num_threads(1)
    out = os.path.join(MODEL_DIR, "golden", "qwen2-fixture")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    weights = random_weights(CONFIG, torch.Generator().manual_seed(31))
    gpt_train.write_safetensors_f16(os.path.join(out, "model.safetensors"), weights, {"format": "pt"}, dtype=torch.bfloat16)
    cfg, w = golden.load_model(out)  # read back: the BF16 values the file holds, widened
    tokens = list(PROMPT.encode("ascii"))
    assert len(tokens) == 40, len(tokens)
    logits = golden.forward(cfg, w, tokens)
    no_window = golden.forward(dict(cfg, sliding_window=None), w, tokens)
    with open(os.path.join(out, "logits.f32"), "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    index = {"description": "PyTorch %s float32 run of the random Qwen2-style checkpoint of make_fixture.py" % torch.__version__,
             "prompt": PROMPT, "file": "logits.f32", "shape": list(logits.shape),
             "maxAbs": round(float(logits.abs().max()), 4),
             "windowMaxAbsEffect": round(float((logits - no_window).abs().max()), 4)}
    golden.write_index(os.path.join(out, "index.json"), index)
    print(json.dumps(index))


if __name__ == "__main__":
    main()
