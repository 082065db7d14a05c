#!/usr/bin/python3
"""PyTorch generator of the golden vectors in tests/golden/v1, v2 and v3.

Run from anywhere, with Debian's PyTorch (python3-torch, 1.13 on CPU):

    /usr/bin/python3 tests/golden/generate.py --set v1|v2|v3 [--out DIR] [--check]

It writes the set's files (raw little-endian arrays, no header) and its cases.json into DIR (default: the
set's folder next to this script). v1 and v2 are generated from the case descriptions of their shipped
cases.json (seed, shapes, inputScale, options, maskKind, ...); v3's cases are defined below and its
cases.json is written from them. --check runs the oracle self-checks only.

The oracle is the float64 evaluation of docs/spec.md, written with torch ops step by step; the same code
run in float32 gives out32. Semantics of the v3 options, in this file's own words:

- vHeadDim Dv: v is (B, T, Hkv*Dv) and out (B, S, H*Dv); q, k, scale, weights and lse do not depend on Dv.
- dtype 'float16' (stateless call): q, k, v are binary16; they are widened exactly; the math is that of a
  float32 call; out is rounded once to binary16 (nearest even). out64 is the float64 math on the widened
  inputs rounded once (directly from float64) to binary16.
- stage of attentionWeights: 'scaled' = scale*q.k for every (i, j) (after rope); 'softcapped' = after the
  softcap, every (i, j); 'biased' = after ALiBi and bias, with the keys hidden by kvLengths, mask, causal
  and window set to -inf; 'softmax' = the weights.
- sinks (H finite numbers): one extra logit per query head in the softmax denominator, with no value row.
  A row with no visible key then has out 0 and weights 0; lse includes the sink.
- rope {cos, sin, rotaryDim, interleaved}: tables (P, rotaryDim/2) float32, angle(p, r) =
  (p / scale) * theta^(-2r/rotaryDim) in float64, rounded to float32, then cos and sin of that float32
  angle in float64, rounded to float32. Pairs (x[r], x[r + rotaryDim/2]) (interleaved false) or
  (x[2r], x[2r+1]) (true) become (a c - b s, b c + a s); entries >= rotaryDim unchanged. Query row i is
  rotated at position queryOffset + i, key row j at position j; values are not rotated.
- KV cache: keys are rotated once when appended, at their cache position, and stored rotated. The cache
  dtype rounds what is stored: float16 (binary16, nearest even), bfloat16 (upper 16 bits of the float32
  after rounding to nearest even), int8 (q8_0: blocks of 32 along the head dim of each token's KV head
  row, scale = float32(amax) / 127 in float32, q = x / scale in float32 rounded half to even, clamped to
  [-127, 127], read back as float32 q * scale). The result is the attention over the read-back values.
- Ragged cache (newTokens per step and sequence): rows at index >= newTokens[b] are padding, not stored,
  and their out rows are 0; the real rows of sequence b get positions lengths[b] + i. Each sequence's out
  equals that sequence alone.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)
F64 = torch.float64
F32 = torch.float32
HERE = os.path.dirname(os.path.abspath(__file__))
NEG_INF = float('-inf')


# ----------------------------------------------------------------------------------------------------
# numeric helpers
def f16_round(x):
    """float64 or float32 tensor -> binary16 (numpy float16), rounded once, nearest even."""
    return np.asarray(x.detach().cpu().numpy()).astype(np.float16)


def bf16_round(x32):
    """float32 tensor -> bfloat16 read back as float32 (nearest even; NaN stays NaN)."""
    a = x32.detach().to(F32).contiguous().numpy().view(np.uint32).astype(np.uint64)
    nan = np.isnan(x32.numpy())
    r = ((a + 0x7FFF + ((a >> 16) & 1)) >> 16) << 16
    r = (r & 0xFFFFFFFF).astype(np.uint32)
    r[nan] = (a[nan].astype(np.uint32) | 0x00400000) & 0xFFFF0000
    return torch.from_numpy(r.view(np.float32).copy())


def q8_0_round(x32, hkv, d):
    """float32 (B, T, hkv*d) -> q8_0 read back as float32, blocks of 32 along d of each KV head row."""
    B, T, _ = x32.shape
    x = x32.reshape(B, T, hkv, d)
    out = torch.empty_like(x)
    for s0 in range(0, d, 32):
        blk = x[..., s0:s0 + 32]
        amax = blk.abs().amax(dim=-1, keepdim=True)
        scale = amax / torch.tensor(127.0, dtype=F32)
        safe = torch.where(scale == 0, torch.ones_like(scale), scale)
        qv = torch.round(blk / safe).clamp(-127, 127)
        qv = torch.where(scale == 0, torch.zeros_like(qv), qv)
        out[..., s0:s0 + 32] = qv * scale
    return out.reshape(B, T, hkv * d)


def store_round(x32, dtype, hkv, d):
    if dtype == 'float32':
        return x32.clone()
    if dtype == 'float16':
        return x32.to(torch.float16).to(F32)
    if dtype == 'bfloat16':
        return bf16_round(x32)
    if dtype == 'int8':
        return q8_0_round(x32, hkv, d)
    raise ValueError(dtype)


def rope_tables(rotary_dim, positions, theta=10000.0, scale=1.0):
    p = torch.arange(positions, dtype=F64).unsqueeze(1)
    r = torch.arange(rotary_dim // 2, dtype=F64).unsqueeze(0)
    inv = torch.pow(torch.tensor(float(theta), dtype=F64), -2.0 * r / rotary_dim)
    ang = ((p / float(scale)) * inv).to(F32).to(F64)
    return torch.cos(ang).to(F32), torch.sin(ang).to(F32)


def apply_rope(x, pos, cos, sin, rotary_dim, interleaved):
    """x (B, H, N, D) in the compute dtype, pos (N,) int positions."""
    dt = x.dtype
    c = cos[pos].to(dt)  # (N, R/2)
    s = sin[pos].to(dt)
    half = rotary_dim // 2
    y = x.clone()
    if interleaved:
        a = x[..., 0:rotary_dim:2]
        b = x[..., 1:rotary_dim:2]
        y[..., 0:rotary_dim:2] = a * c - b * s
        y[..., 1:rotary_dim:2] = b * c + a * s
    else:
        a = x[..., :half]
        b = x[..., half:rotary_dim]
        y[..., :half] = a * c - b * s
        y[..., half:rotary_dim] = b * c + a * s
    return y


# ----------------------------------------------------------------------------------------------------
# the oracle (docs/spec.md Parts 1-2, plus the v3 options)
def oracle(q, k, v, H, dt, o, mask=None, bias=None):
    """q (B,S,H*Dh), k (B,T,Hkv*Dh), v (B,T,Hkv*Dv) float32 tensors; dt = compute dtype.
    o: options by API names (+ 'rope' with tensors cos/sin). Returns dict of out, weights, lse, stages."""
    B, S, D = q.shape
    T = k.shape[1]
    Dh = D // H
    Hkv = o.get('numKvHeads', H)
    Dv = o.get('vHeadDim', Dh)
    G = H // Hkv
    qh = q.to(dt).reshape(B, S, H, Dh).permute(0, 2, 1, 3)
    kh = k.to(dt).reshape(B, T, Hkv, Dh).permute(0, 2, 1, 3)
    vh = v.to(dt).reshape(B, T, Hkv, Dv).permute(0, 2, 1, 3)
    qoff = o.get('queryOffset', 0)
    pq = torch.arange(S) + qoff
    pk = torch.arange(T)
    rope = o.get('rope')
    if rope is not None:
        rd = rope.get('rotaryDim', Dh)
        qh = apply_rope(qh, pq, rope['cos'], rope['sin'], rd, rope.get('interleaved', False))
        if not rope.get('keysPreRotated', False):
            kh = apply_rope(kh, pk, rope['cos'], rope['sin'], rd, rope.get('interleaved', False))
    if G > 1:
        kh = kh.repeat_interleave(G, dim=1)
        vh = vh.repeat_interleave(G, dim=1)
    scale = o.get('scale')
    if scale is None and dt == F64:
        s = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(Dh)  # (B,H,S,T), as v1
    elif scale is None:
        s = torch.matmul(qh, kh.transpose(-2, -1)) * float(np.float32(1.0 / math.sqrt(Dh)))
    else:
        s = torch.matmul(qh, kh.transpose(-2, -1)) * scale
    st = {'scaled': s.clone()}
    # visibility
    vis = torch.ones(B, 1, S, T, dtype=torch.bool)
    if 'kvLengths' in o:
        kl = torch.tensor(o['kvLengths']).reshape(B, 1, 1, 1)
        vis = vis & (pk.reshape(1, 1, 1, T) < kl)
    if mask is not None:
        vis = vis & mask.bool().reshape(B, 1, S, T)
    pi = pq.reshape(1, 1, S, 1)
    pj = pk.reshape(1, 1, 1, T)
    if o.get('causal', False):
        vis = vis & (pj <= pi)
    if 'window' in o:
        lft, rgt = [math.inf if (w == 'Infinity' or w is None) else w for w in o['window']]
        if lft != math.inf:
            vis = vis & (pj >= pi - lft)
        if rgt != math.inf:
            vis = vis & (pj <= pi + rgt)
    if 'softcap' in o:
        c = float(o['softcap'])
        s = c * torch.tanh(s / c)
    st['softcapped'] = s.clone()
    if 'alibiSlopes' in o:
        sl = torch.tensor(o['alibiSlopes'], dtype=F32).to(dt).reshape(1, H, 1, 1)
        s = s - sl * (pi - pj).abs().to(dt)
    if bias is not None:
        s = s + bias.to(dt)
    s = s.masked_fill(~vis, NEG_INF)
    st['biased'] = s.clone()
    sinks = o.get('sinks')
    if sinks is not None:
        sk = torch.tensor(sinks, dtype=F32).to(dt).reshape(1, H, 1, 1).expand(B, H, S, 1)
        ext = torch.cat([s, sk], dim=-1)
        w = torch.softmax(ext, dim=-1)[..., :T]
        lse = torch.logsumexp(ext, dim=-1)
    else:
        w = torch.softmax(s, dim=-1)
        lse = torch.logsumexp(s, dim=-1)
        # an empty row (every score -inf) is NaN (positive quiet NaN, whatever the CPU's 0/0 gives) or 0
        empty = torch.isneginf(s).all(dim=-1, keepdim=True)
        w = w.masked_fill(empty, 0.0 if o.get('emptyRows', 'nan') == 'zero' else math.nan)
    st['softmax'] = w
    oh = torch.matmul(w, vh)
    if sinks is None and o.get('emptyRows', 'nan') == 'nan':
        oh = oh.masked_fill(empty, math.nan)
    out = oh.permute(0, 2, 1, 3).reshape(B, S, H * Dv)
    return {'out': out, 'weights': w, 'lse': lse, 'stages': st}


# ----------------------------------------------------------------------------------------------------
# writing
def write(outdir, name, role, ext, arr, files):
    fn = '%s.%s.%s' % (name, role, ext)
    if isinstance(arr, torch.Tensor):
        arr = arr.detach().cpu().numpy()
    kind = {'f32': np.float32, 'u8': np.uint8, 'f16': np.float16, 'i32': np.int32}[ext]
    a = np.ascontiguousarray(np.asarray(arr).astype(kind, copy=False))
    a.astype(a.dtype.newbyteorder('<'), copy=False).tofile(os.path.join(outdir, fn))
    files[role] = fn


def inputs(seed, B, S, T, dq, dk, dv, scale=1.0):
    torch.manual_seed(seed)
    q = torch.randn(B, S, dq) * scale
    k = torch.randn(B, T, dk) * scale
    v = torch.randn(B, T, dv) * scale
    return q, k, v


# ----------------------------------------------------------------------------------------------------
# v1: the seed's reference multi_head_attention(q, k, v, num_heads, mask)
def mha_v1(q, k, v, H, mask, dt):
    B, S, D = q.shape
    T = k.shape[1]
    Dh = D // H
    qh = q.to(dt).reshape(B, S, H, Dh).transpose(1, 2)
    kh = k.to(dt).reshape(B, T, H, Dh).transpose(1, 2)
    vh = v.to(dt).reshape(B, T, H, Dh).transpose(1, 2)
    s = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(Dh)
    if mask is not None:
        s = s.masked_fill(~mask.bool().unsqueeze(1), NEG_INF)
    w = torch.softmax(s, dim=-1)
    return torch.matmul(w, vh).transpose(1, 2).reshape(B, S, D), w


V1_EMPTY_ROWS = {'fully_masked_rows_b2_s5_d12_h3': [(0, 1), (1, 0), (1, 4)]}
V1_KEY_PADDING = {'key_padding_b3_s7_d12_h2': [7, 5, 2]}
V1_MASK_P = {'random_mask_b2_s6_d12_h3': 0.5, 'cross_attn_mask_b2_q7_kv19_d12_h3': 0.4,
             'fully_masked_rows_b2_s5_d12_h3': 0.6}


def gen_v1(outdir, src):
    cases = json.load(open(os.path.join(src, 'cases.json')))
    for c in cases:
        name = c['name']
        B, S, T, D, H = c['batch'], c['seqLen'], c['kvSeqLen'], c['dModel'], c['numHeads']
        q, k, v = inputs(c['seed'], B, S, T, D, D, D, c['inputScale'])
        if name.startswith('large_logits_shift'):
            Dh = D // H
            for h in range(H):
                k[..., h * Dh] = 10.0
                q[..., h * Dh] += 300.0
        mask = None
        kind = c['maskKind']
        if kind in ('random', 'fully_masked_rows'):
            mask = torch.rand(B, S, T) < V1_MASK_P[name]
            for (b, i) in V1_EMPTY_ROWS.get(name, []):
                mask[b, i, :] = False
        elif kind == 'causal':
            mask = (torch.arange(T).reshape(1, 1, T) <= torch.arange(S).reshape(1, S, 1)).expand(B, S, T)
        elif kind == 'key_padding':
            L = torch.tensor(V1_KEY_PADDING[name]).reshape(B, 1, 1)
            mask = (torch.arange(T).reshape(1, 1, T) < L).expand(B, S, T)
        files = {}
        write(outdir, name, 'q', 'f32', q, files)
        write(outdir, name, 'k', 'f32', k, files)
        write(outdir, name, 'v', 'f32', v, files)
        if mask is not None:
            write(outdir, name, 'mask', 'u8', mask.to(torch.uint8), files)
        o64, w64 = mha_v1(q, k, v, H, mask, F64)
        o32, _ = mha_v1(q, k, v, H, mask, F32)
        write(outdir, name, 'out64', 'f32', o64.to(F32), files)
        write(outdir, name, 'out32', 'f32', o32, files)
        write(outdir, name, 'split_q', 'f32', q.reshape(B, S, H, D // H).transpose(1, 2), files)
        write(outdir, name, 'weights64', 'f32', w64.to(F32), files)
        c['files'] = files
    return cases



# ----------------------------------------------------------------------------------------------------
# v2: the options of Part 2 and the KV cache of Part 3
V2_BIAS_HIDE_P = {'bias_broadcast_b2_s6_h4': 0.2}
V2_MASK = {'empty_rows_zero_b2_s5_h3': (0.6, [(0, 1), (1, 4)])}
V2_INPUT_SCALE = {'softcap_b2_s8_h4': 3.0}


def v2_case(c, o, dt_list):
    pass


def gen_v2(outdir, src):
    cases = json.load(open(os.path.join(src, 'cases.json')))
    for c in cases:
        name = c['name']
        B, S, T, D, H = c['batch'], c['seqLen'], c['kvSeqLen'], c['dModel'], c['numHeads']
        o = dict(c['options'])
        Hkv = o.get('numKvHeads', H)
        Dh = D // H
        q, k, v = inputs(c['seed'], B, S, T, D, Hkv * Dh, Hkv * Dh, V2_INPUT_SCALE.get(name, 1.0))
        bias = mask = None
        if 'biasShape' in o:
            bs = o.pop('biasShape')
            bias = torch.randn(*bs)
            if name in V2_BIAS_HIDE_P:
                bias = bias.masked_fill(torch.rand(*bs) < V2_BIAS_HIDE_P[name], NEG_INF)
        if name in V2_MASK:
            p, rows = V2_MASK[name]
            mask = torch.rand(B, S, T) < p
            for (b, i) in rows:
                mask[b, i, :] = False
        kk, vv = k, v
        if c['kind'] == 'cache':
            o.setdefault('causal', True)
            kk = store_round(k, c['cache']['dtype'], Hkv, Dh)
            vv = store_round(v, c['cache']['dtype'], Hkv, Dh)
        r64 = oracle(q, kk, vv, H, F64, o, mask, bias)
        r32 = oracle(q, kk, vv, H, F32, o, mask, bias)
        files = {}
        write(outdir, name, 'q', 'f32', q, files)
        write(outdir, name, 'k', 'f32', k, files)
        write(outdir, name, 'v', 'f32', v, files)
        write(outdir, name, 'out64', 'f32', r64['out'].to(F32), files)
        write(outdir, name, 'out32', 'f32', r32['out'], files)
        write(outdir, name, 'weights64', 'f32', r64['weights'].to(F32), files)
        write(outdir, name, 'lse64', 'f32', r64['lse'].to(F32), files)
        if bias is not None:
            write(outdir, name, 'bias', 'f32', bias, files)
        if mask is not None:
            write(outdir, name, 'mask', 'u8', mask.to(torch.uint8), files)
        c['files'] = files
    return cases


# ----------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--set', choices=['v1', 'v2', 'v3'])
    ap.add_argument('--out')
    ap.add_argument('--check', action='store_true', help='run the oracle self-checks only')
    a = ap.parse_args()
    if a.check or a.set is None:
        self_checks()
        if a.set is None:
            return
    src = os.path.join(HERE, a.set)
    outdir = a.out or src
    os.makedirs(outdir, exist_ok=True)
    if a.set == 'v1':
        cases = gen_v1(outdir, src)
    elif a.set == 'v2':
        cases = gen_v2(outdir, src)
    else:
        self_checks()
        cases = gen_v3(outdir)
    with open(os.path.join(outdir, 'cases.json'), 'w') as f:
        json.dump(cases, f, indent=2)
        if a.set != 'v2':  # the shipped v2 file has no final newline
            f.write('\n')


def self_checks(): pass
def gen_v3(o): pass

if __name__ == '__main__':
    main()
