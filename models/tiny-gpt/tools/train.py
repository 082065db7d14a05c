#!/usr/bin/python3
"""Train tiny-gpt: a byte-level GPT-2-style decoder with grouped-query attention.

Not run by `npm test`. Run it with Debian's python3-torch (1.13), i.e. /usr/bin/python3, not a pyenv
python3 that may be first on PATH:

    apt-get install bible-kjv            # the corpus (see below)
    /usr/bin/python3 models/tiny-gpt/tools/train.py --n-ctx 256 --batch 16 --lr 2e-3 --minutes 48

Speed: Debian's torch 1.13 links libblas.so.3, which on a fresh machine is the reference BLAS (about
4.5 GFLOP/s here on one core). OpenBLAS is ten times faster (45 GFLOP/s). The committed weights were
trained with Debian's single-threaded OpenBLAS unpacked into /tmp rather than installed, so the machine's
BLAS alternative stayed as it was:

    cd /tmp && apt-get download libopenblas0-serial && dpkg-deb -x libopenblas0-serial_*.deb openblas
    LD_LIBRARY_PATH=/tmp/openblas/usr/lib/x86_64-linux-gnu/openblas-serial /usr/bin/python3 models/tiny-gpt/tools/train.py ...

Size: issue 17 suggests a context of 512. On this 2-core machine, shared with other jobs, one training
thread runs about 900 tokens/s at context 512 and 1,200 at 256 (the (S, S) score tensors dominate the
time more than the matmuls), so 50 minutes would not even cover the 4 MB corpus once at 512; the model
keeps the suggested width and depth and uses n_ctx = 256.

Corpus: the King James Version of the Bible as shipped by Debian's `bible-kjv-text` package (4.38; its
text is in the public domain, the package's own code is GPL-2+). It is stored in a compressed format that
only the `bible` program of the `bible-kjv` package decodes, so this script runs
`bible -f -m 8000 gen1:1-rev22:21` (one verse per line, each prefixed with its reference), strips the
references and trains on the remaining 4,137,850 bytes of ASCII prose. Pass --corpus FILE to train on
another UTF-8 text instead.

The model is fixed by issue 17 (tensor names, shapes, semantics); models/tiny-gpt/tools/make_golden.py loads
the result with its own plain torch code, without importing this file. The weights are written as
float16 safetensors, by hand (struct + json), since the safetensors package is not in Debian bookworm.

Determinism: the seed fixes initialisation and the batch order. By default the learning-rate schedule
follows the fraction of the --minutes budget spent, so the number of steps depends on the machine's speed
(training.json records it); --steps N makes the schedule a function of the step alone, for exact repeats.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The model's folder (config.json, model.safetensors, golden/): the parent of this tools/ folder.
MODEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------

def read_kjv_corpus():
    """The KJV as bytes, one verse per line, without the verse references."""
    raw = subprocess.run(["bible", "-f", "-m", "8000", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, check=True).stdout
    lines = raw.decode("ascii").split("\n")
    verses = []
    for line in lines:
        if not line:
            continue
        reference, _, text = line.partition(" ")
        if ":" not in reference:
            raise ValueError("unexpected line from bible: %r" % line[:80])
        verses.append(text)
    return ("\n".join(verses) + "\n").encode("ascii")


def split_train_val(data, n_chunks=100, val_every=20):
    """Interleaved split: every val_every-th of n_chunks contiguous chunks is validation (5% by default),
    so validation covers the whole book rather than only its end."""
    chunk = len(data) // n_chunks
    train, val = [], []
    for c in range(n_chunks):
        part = data[c * chunk:(c + 1) * chunk if c < n_chunks - 1 else len(data)]
        (val if c % val_every == val_every - 1 else train).append(part)
    return b"".join(train), b"".join(val)


def unigram_bits_per_byte(train, val):
    counts = torch.bincount(torch.frombuffer(bytearray(train), dtype=torch.uint8).long(), minlength=256)
    p = (counts.double() + 1.0) / (counts.sum() + 256.0)  # add-one smoothing
    v = torch.frombuffer(bytearray(val), dtype=torch.uint8).long()
    return float(-torch.log2(p[v]).mean())


def bigram_bits_per_byte(train, val):
    t = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
    counts = torch.zeros(256 * 256, dtype=torch.float64)
    counts.index_add_(0, t[:-1] * 256 + t[1:], torch.ones(len(t) - 1, dtype=torch.float64))
    counts = counts.view(256, 256) + 1.0 / 256  # add-1/256 smoothing per row
    p = counts / counts.sum(dim=1, keepdim=True)
    v = torch.frombuffer(bytearray(val), dtype=torch.uint8).long()
    return float(-torch.log2(p[v[:-1], v[1:]]).mean())


# ---------------------------------------------------------------------------------------------------
# Model (names and shapes fixed by issue 17)
# ---------------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d_model, n_head, n_kv_head):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, d_model // n_head
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, n_kv_head * self.head_dim)
        self.v = nn.Linear(d_model, n_kv_head * self.head_dim)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x):
        # x: (B, S, D) -> (B, S, D)
        B, S, D = x.shape
        H, Hkv, Dh = self.n_head, self.n_kv_head, self.head_dim
        q = self.q(x).view(B, S, H, Dh).transpose(1, 2)
        k = self.k(x).view(B, S, Hkv, Dh).transpose(1, 2)
        v = self.v(x).view(B, S, Hkv, Dh).transpose(1, 2)
        # query head h reads KV head h // (H / Hkv)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, S, D))


class MLP(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.proj = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg["layer_norm_eps"]
        self.ln1 = nn.LayerNorm(cfg["d_model"], eps=eps)
        self.attn = Attention(cfg["d_model"], cfg["n_head"], cfg["n_kv_head"])
        self.ln2 = nn.LayerNorm(cfg["d_model"], eps=eps)
        self.mlp = MLP(cfg["d_model"], cfg["d_ff"])

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.pos_emb = nn.Embedding(cfg["n_ctx"], cfg["d_model"])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(cfg["d_model"], eps=cfg["layer_norm_eps"])
        self.reset_parameters()

    def reset_parameters(self):
        # GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 L)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            else:
                std = 0.02
                if name.endswith("attn.o.weight") or name.endswith("mlp.proj.weight"):
                    std = 0.02 / math.sqrt(2 * self.cfg["n_layer"])
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        # idx: (B, S) int64 -> logits (B, S, vocab)
        S = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(S, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok_emb.weight.t()


# ---------------------------------------------------------------------------------------------------
# safetensors writer (the standard layout: u64 LE header length, JSON header, raw little-endian data)
# ---------------------------------------------------------------------------------------------------

# torch dtype -> (safetensors name, the integer type of the same width whose bytes numpy can write)
_SAFETENSORS_DTYPES = {torch.float16: ("F16", torch.int16, "<i2"), torch.bfloat16: ("BF16", torch.int16, "<i2"),
                       torch.float32: ("F32", torch.int32, "<i4")}


def write_safetensors_f16(path, tensors, metadata, dtype=torch.float16):
    """Every tensor as `dtype` (float16 by default; bfloat16 or float32 for test checkpoints)."""
    name_of, as_int, layout = _SAFETENSORS_DTYPES[dtype]
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(dtype).contiguous().view(as_int).numpy().astype(layout).tobytes()
        header[name] = {"dtype": name_of, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for blob in blobs:
            f.write(blob)


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------

def batch_from(data_tensor, batch, seq, generator):
    starts = torch.randint(0, len(data_tensor) - seq - 1, (batch,), generator=generator)
    rows = torch.stack([data_tensor[s:s + seq + 1] for s in starts.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]


def adamw(model, lr):
    """AdamW, weight decay 0.1 on the matrices only (not on biases and norm weights)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.99))


def make_train_step(model, opt, train_t, batch, seq, generator):
    """train_step(lr) -> loss: one optimizer step on a random batch, gradients clipped to norm 1."""
    def train_step(lr):
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batch_from(train_t, batch, seq, generator)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)
    return train_step


WARMUP_STEPS = 50


def scheduled_lr(peak, s, progress):
    """Linear warmup over the first WARMUP_STEPS steps, then cosine from peak down to peak / 10 as
    progress goes from 0 to 1."""
    if s < WARMUP_STEPS:
        return peak * (s + 1) / WARMUP_STEPS
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def bench(train_step, peak, steps, tokens_per_step):
    """Times `steps` warmup steps and prints s/step and tokens/s."""
    t0 = time.time()
    for s in range(steps):
        train_step(scheduled_lr(peak, s, 0.0))
    dt = (time.time() - t0) / steps
    print("bench: %.3f s/step, %.0f tokens/s" % (dt, tokens_per_step / dt))


def training_report(corpus, data, train, val, run, uni, bi):
    """training.json: the corpus and its split, the run's fields (seed, steps, ..., val_bits_per_byte),
    then the baselines."""
    report = {"corpus": "bible-kjv-text 4.38 (Debian), King James Version, public domain" if not corpus
              else os.path.basename(corpus),
              "corpus_bytes": len(data), "train_bytes": len(train), "val_bytes": len(val)}
    report.update(run)
    report.update({"unigram_bits_per_byte": round(uni, 4), "bigram_bits_per_byte": round(bi, 4),
                   "torch": torch.__version__})
    return report


@torch.no_grad()
def validation_bits_per_byte(model, val_tensor, seq, batches=None):
    """Mean loss over non-overlapping windows of the validation text (each window's first tokens have
    less context; that is the model's use, not a flaw of the measurement)."""
    model.eval()
    n_windows = (len(val_tensor) - 1) // seq
    if batches is not None:
        n_windows = min(n_windows, batches)
    total, count = 0.0, 0
    for w in range(0, n_windows, 8):
        ws = range(w, min(w + 8, n_windows))
        rows = torch.stack([val_tensor[i * seq:i * seq + seq + 1] for i in ws]).long()
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1), reduction="sum")
        total += float(loss)
        count += rows[:, 1:].numel()
    model.train()
    return total / count / math.log(2)


def evaluate_published(args):
    from make_golden import load_model  # the plain-torch loader, so this measures the published file
    torch.set_num_threads(args.threads)
    cfg, tensors = load_model(args.evaluate)
    model = TinyGPT(cfg)
    model.load_state_dict(tensors)
    data = open(args.corpus, "rb").read() if args.corpus else read_kjv_corpus()
    _, val = split_train_val(data)
    bpb = validation_bits_per_byte(model, torch.frombuffer(bytearray(val), dtype=torch.uint8), cfg["n_ctx"])
    print("validation: %.4f bits/byte with the F16 weights of %s" % (bpb, args.evaluate))
    path = os.path.join(args.evaluate, "training.json")
    report = json.load(open(path)) if os.path.exists(path) else {}
    report["val_bits_per_byte_f16_weights"] = round(bpb, 4)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", help="a UTF-8 text file (default: the KJV from the bible-kjv package)")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--n-kv-head", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--train-seq", type=int, default=0, help="training sequence length (default n_ctx)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--minutes", type=float, default=50.0, help="wall-clock budget for the training steps")
    ap.add_argument("--steps", type=int, default=0, help="fixed number of steps (overrides --minutes)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=MODEL_DIR)
    ap.add_argument("--bench", type=int, default=0, help="only time this many steps and exit")
    ap.add_argument("--init", metavar="DIR", help="start from DIR's config.json + model.safetensors (a second phase; "
                    "the model options are then taken from DIR's config.json)")
    ap.add_argument("--evaluate", metavar="DIR", help="only measure the validation loss of DIR's config.json + "
                    "model.safetensors (the F16 weights as published) and add it to DIR/training.json")
    args = ap.parse_args()
    if args.evaluate:
        return evaluate_published(args)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    cfg = {"n_layer": args.n_layer, "d_model": args.d_model, "n_head": args.n_head,
           "n_kv_head": args.n_kv_head, "d_ff": args.d_ff, "n_ctx": args.n_ctx, "vocab_size": 256,
           "layer_norm_eps": 1e-5}
    train_seq = args.train_seq or args.n_ctx

    data = open(args.corpus, "rb").read() if args.corpus else read_kjv_corpus()
    train, val = split_train_val(data)
    print("corpus %d bytes: train %d, val %d" % (len(data), len(train), len(val)), flush=True)
    uni, bi = unigram_bits_per_byte(train, val), bigram_bits_per_byte(train, val)
    print("baselines on val: unigram %.4f bits/byte, bigram %.4f bits/byte" % (uni, bi), flush=True)
    train_t = torch.frombuffer(bytearray(train), dtype=torch.uint8)
    val_t = torch.frombuffer(bytearray(val), dtype=torch.uint8)

    previous = None
    if args.init:
        from make_golden import load_model
        cfg, tensors = load_model(args.init)
        train_seq = args.train_seq or cfg["n_ctx"]
        model = TinyGPT(cfg)
        model.load_state_dict(tensors)
        previous_path = os.path.join(args.init, "training.json")
        previous = json.load(open(previous_path)) if os.path.exists(previous_path) else None
        print("starting from %s: val %.4f bits/byte" % (args.init, validation_bits_per_byte(model, val_t, train_seq)), flush=True)
    else:
        model = TinyGPT(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print("config %s, %d parameters" % (json.dumps(cfg), n_params), flush=True)
    opt = adamw(model, args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    train_step = make_train_step(model, opt, train_t, args.batch, train_seq, gen)
    if args.bench:
        return bench(train_step, args.lr, args.bench, args.batch * train_seq)

    t0 = time.time()
    # The schedule follows the fraction of the wall-clock budget spent (a shared machine's speed varies
    # too much to turn minutes into steps up front), unless --steps fixes it in steps for an exact repeat.
    budget_s = args.minutes * 60
    losses, s = [], 0
    while True:
        elapsed = time.time() - t0
        if args.steps:
            if s >= args.steps:
                break
            progress = s / args.steps
        else:
            if elapsed >= budget_s:
                break
            progress = elapsed / budget_s
        lr = scheduled_lr(args.lr, s, progress)
        losses.append(train_step(lr))
        s += 1
        if s % 50 == 0:
            recent = sum(losses[-50:]) / len(losses[-50:])
            msg = "step %d  lr %.2e  train %.4f bits/byte  %.1f min" % (s, lr, recent / math.log(2), elapsed / 60)
            if s % 200 == 0:
                msg += "  val(sample) %.4f" % validation_bits_per_byte(model, val_t, train_seq, batches=32)
            print(msg, flush=True)
    total_steps = s
    train_minutes = (time.time() - t0) / 60

    val_bpb = validation_bits_per_byte(model, val_t, train_seq)
    print("final: val %.4f bits/byte (unigram %.4f, bigram %.4f), %d steps, %.1f min" % (
        val_bpb, uni, bi, total_steps, train_minutes), flush=True)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    state = {k: v for k, v in model.state_dict().items()}
    write_safetensors_f16(os.path.join(args.out, "model.safetensors"), state, {"format": "pt"})
    report = training_report(args.corpus, data, train, val, {
        "seed": args.seed, "steps": total_steps, "batch": args.batch, "train_seq": train_seq, "lr": args.lr,
        "threads": args.threads, "train_minutes": round(train_minutes, 1), "parameters": n_params,
        "val_bits_per_byte": round(val_bpb, 4)}, uni, bi)
    if previous is not None:
        report["init"] = args.init
        report["previous_phase"] = previous
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    sys.exit(main())
