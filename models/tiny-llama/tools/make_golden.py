#!/usr/bin/python3
"""PyTorch golden data for tiny-llama, from config.json + model.safetensors alone.

    /usr/bin/python3 models/tiny-llama/tools/make_golden.py

This file does not import train.py: it reads the safetensors file with plain struct/json (the reader of
models/tiny-gpt/tools/make_golden.py, which handles F16, BF16 and F32, and whose greedy loop it also uses) and
runs the Hugging Face Llama forward pass with plain torch ops, to show that any PyTorch user can load the
published files.

Writes models/tiny-llama/golden/:
- index.json: the prompts, the greedy tokens and, per generated token, the gap between the two largest
  logits (a JS run that differs from PyTorch by float rounding can only pick another byte where that gap
  is about as small as the rounding);
- logits_f32kv.f32 and logits_f16kv.f32: float32 little-endian (P + 100, 256), the logits at every
  position of the prompt (P bytes) followed by its 100 greedy tokens, one full causal pass, with the K/V in
  float32 and with the K/V rounded to binary16: k after rope and v, rounded to nearest even right before
  attention (what a float16 KV cache stores; queries are not rounded). Each run has its own greedy tokens.
- generations: greedy tokens from other prompts of different lengths, both K/V dtypes.

RoPE tables: cos and sin of angle(p, r) = p * theta^(-2r / Dh) computed in float64 and rounded to
float32, the definition of docs/spec.md 4.5 (mha.ropeTables). Hugging Face computes the angles in
float32; index.json records how far that moves the logits (hfFloat32TablesMaxAbsDiff), a difference of
the reference implementation's rounding, not of the model.
"""
import argparse
import importlib.util
import json
import math
import os

import torch
import torch.nn.functional as F

# The model's folder (config.json, model.safetensors, golden/): the parent of this tools/ folder.
MODEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_spec = importlib.util.spec_from_file_location("tiny_gpt_make_golden", os.path.join(MODEL_DIR, "..", "tiny-gpt", "tools", "make_golden.py"))
_gpt_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gpt_golden)
load_safetensors = _gpt_golden.load_safetensors  # the plain struct/json reader (F16, BF16, F32)
write_index = _gpt_golden.write_index

# 148 bytes of ASCII (checked below): in the style of the training text, but not a verse of it.
PROMPT = ("And the king sent messengers unto the city, saying, Bring forth the men that came unto thee. "
          "And they went out by night, and the watchmen saw them.\n")
DECODE_STEPS = 100
GENERATION_PROMPTS = ["In the beginning ", "And the LORD said unto Moses, ",
                      "Then answered the shepherds of the hill country, and said unto the elders of the city, "]
GENERATED_TOKENS = 100


def load_model(folder=MODEL_DIR):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    return cfg, load_safetensors(os.path.join(folder, "model.safetensors"))


def rope_tables(S, Dh, theta, hf_float32=False):
    """cos, sin (S, Dh): the spec's float64 angles rounded to float32, or HF's float32 angles."""
    dtype = torch.float32 if hf_float32 else torch.float64
    inv_freq = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh))
    freqs = torch.outer(torch.arange(S, dtype=dtype), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # HF layout: each frequency for both halves
    return emb.cos().float(), emb.sin().float()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def sliding(cfg, i):
    """Whether layer i has a sliding window, as Hugging Face decides it: Mistral's every layer; Qwen2's with
    use_sliding_window, from layer max_window_layers on; or the config's layer_types."""
    if cfg.get("sliding_window") is None or cfg.get("use_sliding_window") is False:
        return False
    if cfg.get("layer_types"):
        return cfg["layer_types"][i] == "sliding_attention"
    return i >= (cfg.get("max_window_layers", 0) if cfg.get("use_sliding_window") else 0)


def forward(cfg, w, tokens, kv_dtype=torch.float32, hf_float32_tables=False):
    """tokens: list of byte ids (S) -> logits (S, vocab), the HF Llama forward pass in float32.

    kv_dtype=torch.float16 rounds k (after rope) and v to binary16 and back before attention."""
    S = len(tokens)
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    Dh, eps = cfg.get("head_dim") or D // H, cfg["rms_norm_eps"]
    cos, sin = rope_tables(S, Dh, cfg["rope_theta"], hf_float32_tables)
    x = w["model.embed_tokens.weight"][torch.tensor(tokens, dtype=torch.long)]
    causal_hidden = torch.ones(S, S, dtype=torch.bool).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        hidden = causal_hidden
        if sliding(cfg, i):  # a query sees its own key and the W - 1 before it (HF's Mistral and Qwen2 mask)
            hidden = hidden | torch.ones(S, S, dtype=torch.bool).tril(-cfg["sliding_window"])
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = F.linear(h, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias")).view(S, H, Dh).transpose(0, 1)
        k = F.linear(h, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias")).view(S, Hkv, Dh).transpose(0, 1)
        v = F.linear(h, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias")).view(S, Hkv, Dh).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = k.to(kv_dtype).float(), v.to(kv_dtype).float()
        # query head h reads KV head h // (H / Hkv)
        k, v = k.repeat_interleave(H // Hkv, dim=0), v.repeat_interleave(H // Hkv, dim=0)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        y = F.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ v
        x = x + F.linear(y.transpose(0, 1).reshape(S, H * Dh), w[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = F.linear(h, w[p + "mlp.gate_proj.weight"])
        u = F.linear(h, w[p + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(g) * u, w[p + "mlp.down_proj.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])  # tied when there is no lm_head
    return rms_norm(x, w["model.norm.weight"], eps) @ head.t()


def greedy(cfg, w, prompt_tokens, n, kv_dtype):
    """n greedy bytes from full causal passes (no cache): tiny-gpt's loop over this file's forward."""
    return _gpt_golden.greedy(cfg, w, prompt_tokens, n, kv_dtype, forward_fn=forward)


def as_text(tokens):
    return bytes(tokens).decode("utf-8", errors="replace")


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL_DIR, help="folder with config.json and model.safetensors; golden/ is written there")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg, w = load_model(args.model)
    prompt = list(PROMPT.encode("ascii"))
    assert len(prompt) == 148, len(prompt)
    out_dir = os.path.join(args.model, "golden")
    os.makedirs(out_dir, exist_ok=True)

    runs = {}
    for name, dtype in (("f32", torch.float32), ("f16", torch.float16)):
        tokens, gaps = greedy(cfg, w, prompt, DECODE_STEPS, dtype)
        logits = forward(cfg, w, prompt + tokens, dtype)
        file = "logits_%skv.f32" % name
        with open(os.path.join(out_dir, file), "wb") as f:
            f.write(logits.contiguous().numpy().astype("<f4").tobytes())
        runs[name] = {"file": file, "dtype": "float32", "shape": list(logits.shape),
                      "maxAbs": round(float(logits.abs().max()), 4), "tokens": tokens, "text": as_text(tokens),
                      "minTopGap": round(min(gaps), 6), "values": logits}
        print("%s: %r (smallest top-2 gap %.4g)" % (name, as_text(tokens), min(gaps)))
    sequence = prompt + runs["f32"]["tokens"]
    hf_tables = forward(cfg, w, sequence, torch.float32, hf_float32_tables=True)
    hf_diff = float((hf_tables - runs["f32"]["values"]).abs().max())
    f16_diff = float((forward(cfg, w, sequence, torch.float16) - runs["f32"]["values"]).abs().max())

    generations = []
    for text in GENERATION_PROMPTS:
        entry = {"prompt": text}
        for name, dtype in (("f32", torch.float32), ("f16", torch.float16)):
            tokens, gaps = greedy(cfg, w, list(text.encode("utf-8")), GENERATED_TOKENS, dtype)
            entry[name] = {"tokens": tokens, "text": as_text(tokens), "minTopGap": round(min(gaps), 6)}
            print("%s %r -> %r (smallest top-2 gap %.4g)" % (name, text, entry[name]["text"], min(gaps)))
        generations.append(entry)

    for run in runs.values():
        del run["values"]
    index = {
        "description": "PyTorch %s float32 run of models/tiny-llama (config.json + model.safetensors, F16 weights "
                       "widened to float32), made by make_golden.py" % torch.__version__,
        "prompt": PROMPT,
        "decodeSteps": DECODE_STEPS,
        "runs": runs,
        "f16KVMaxAbsDiffFromF32": f16_diff,
        "hfFloat32TablesMaxAbsDiff": hf_diff,
        "generatedTokens": GENERATED_TOKENS,
        "generations": generations,
    }
    write_index(os.path.join(out_dir, "index.json"), index)


if __name__ == "__main__":
    main()
