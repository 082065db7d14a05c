#!/usr/bin/python3
"""Which heads of tiny-gpt are previous-token heads and which are induction heads, by score.

    /usr/bin/python3 models/tiny-gpt/tools/analyze_heads.py

Uses make_golden.py's plain-torch loader and forward pass (not the training code). Writes heads.json:
for every layer x head,
- previousToken: the mean attention weight from position i to position i - 1, over every i >= 1 of
  English text (the 200-byte golden prompt and the three generation prompts are too short, so it uses
  fixed sentences below, not taken from the training corpus);
- induction: on a sequence of random distinct bytes repeated three times, the mean attention from
  position i to the position right after the last earlier occurrence of the byte at i (for i in the
  repeats, where that position is i - period + 1), averaged over several random sequences. The bytes
  are drawn from those the corpus uses, so the embeddings are trained ones.
A head is labelled when its score passes the threshold written into heads.json. Uniform causal
attention would give about 1 / (i + 1) to any one key, so both thresholds are far above chance.
"""
import argparse
import json
import math
import os
import random
import re

import torch

from make_golden import MODEL_DIR, forward, load_model

PREVIOUS_TOKEN_THRESHOLD = 0.4
INDUCTION_THRESHOLD = 0.3

TEXTS = [
    "The old lighthouse keeper climbed the winding stairs every evening, lit the great lamp, and watched the "
    "ships pass safely beyond the rocks until morning came over the grey water.",
    "When the rain finally stopped, the children ran out into the muddy fields, laughing and shouting, while "
    "their mothers called after them from the doorways of the small stone houses.",
]
# The printable bytes of the KJV text (letters, digits and its punctuation), without newline and space.
ALPHABET = sorted(set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,.;:?!'()-"))


def previous_token_scores(cfg, w):
    totals = torch.zeros(cfg["n_layer"], cfg["n_head"])
    count = 0
    for text in TEXTS:
        tokens = list(text.encode("ascii"))[:cfg["n_ctx"]]
        _, attentions = forward(cfg, w, tokens, return_attention=True)
        S = len(tokens)
        for layer, weights in enumerate(attentions):  # (H, S, S)
            totals[layer] += weights[:, torch.arange(1, S), torch.arange(0, S - 1)].sum(dim=1)
        count += S - 1
    return totals / count


def induction_sequences(period=40, repeats=3, sequences=8, seed=17):
    rng = random.Random(seed)
    # distinct bytes in a segment: each position of a repeat has exactly one earlier match per repeat
    return [rng.sample(ALPHABET, period) * repeats for _ in range(sequences)]


def induction_scores(cfg, w, sequence_list, period=40):
    """Per-head induction scores, and the model's loss (bits/byte) on the first segment and on the repeats:
    a model that copies from context predicts the repeats far better."""
    totals = torch.zeros(cfg["n_layer"], cfg["n_head"])
    count = 0
    first_bits, repeat_bits = [], []
    for tokens in sequence_list:
        logits, attentions = forward(cfg, w, tokens, return_attention=True)
        nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(tokens[1:]), reduction="none") / math.log(2)
        first_bits.append(nll[:period - 1])  # predicting bytes 1 .. period-1
        repeat_bits.append(nll[period:])  # predicting bytes period+1 ..
        queries = torch.arange(period, len(tokens))
        targets = queries - period + 1  # the byte after the last earlier occurrence of tokens[i]
        for layer, weights in enumerate(attentions):
            totals[layer] += weights[:, queries, targets].sum(dim=1)
        count += len(queries)
    copying = {"firstSegmentBitsPerByte": round(float(torch.cat(first_bits).mean()), 4),
               "repeatsBitsPerByte": round(float(torch.cat(repeat_bits).mean()), 4)}
    return totals / count, copying


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL_DIR, help="folder with config.json and model.safetensors; heads.json is written there")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg, w = load_model(args.model)
    prev = previous_token_scores(cfg, w)
    sequence_list = induction_sequences()
    ind, copying = induction_scores(cfg, w, sequence_list)
    print("loss on the random segment %.3f bits/byte, on its repeats %.3f" % (
        copying["firstSegmentBitsPerByte"], copying["repeatsBitsPerByte"]))
    heads = []
    for layer in range(cfg["n_layer"]):
        for head in range(cfg["n_head"]):
            labels = []
            if prev[layer, head] >= PREVIOUS_TOKEN_THRESHOLD:
                labels.append("previous-token")
            if ind[layer, head] >= INDUCTION_THRESHOLD:
                labels.append("induction")
            heads.append({"layer": layer, "head": head, "kvHead": head // (cfg["n_head"] // cfg["n_kv_head"]),
                          "previousToken": round(float(prev[layer, head]), 4),
                          "induction": round(float(ind[layer, head]), 4), "labels": labels})
            print("layer %d head %d: previous-token %.3f  induction %.3f  %s" % (
                layer, head, prev[layer, head], ind[layer, head], " ".join(labels)))
    report = {
        "description": "per-head attention scores of tiny-gpt, computed by analyze_heads.py in PyTorch",
        "previousToken": {"threshold": PREVIOUS_TOKEN_THRESHOLD,
                          "definition": "mean attention weight from position i to i-1 over English sentences",
                          "texts": TEXTS},
        "induction": {"threshold": INDUCTION_THRESHOLD,
                      "definition": "mean attention weight from position i to the position after the last earlier "
                                    "occurrence of token i, on random distinct bytes (period 40) repeated 3 times, "
                                    "8 sequences",
                      "period": 40, "sequences": sequence_list, "modelLoss": copying},
        "heads": heads,
    }
    text = json.dumps(report, indent=1)  # number lists on one line each
    text = re.sub(r"\[\s*([-0-9.,\s]+?)\s*\]", lambda m: "[" + ",".join(m.group(1).split()).replace(",,", ",") + "]", text)
    with open(os.path.join(args.model, "heads.json"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
