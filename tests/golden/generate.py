#!/usr/bin/python3
"""PyTorch generator of the golden vectors in tests/golden/v1, v2, v3 and v4 (v4: generate_v4.py).

Run from anywhere, with Debian's PyTorch (python3-torch, 1.13 on CPU):

    /usr/bin/python3 tests/golden/generate.py --set v1|v2|v3|v4 [--out DIR] [--check]

It writes the set's files (raw little-endian arrays, no header) and its cases.json into DIR (default: the
set's folder next to this script). v1 and v2 are generated from the case descriptions of their shipped
cases.json (seed, shapes, inputScale, options, maskKind, ...); v3's cases are defined below, v4's in
generate_v4.py, and their cases.json is written from them. --check runs the oracle self-checks only.

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
  (p / scale) * theta^(-2r/rotaryDim), cos and sin computed in float64 and rounded to float32 (what
  ropeTables returns). Pairs (x[r], x[r + rotaryDim/2]) (interleaved false) or
  (x[2r], x[2r+1]) (true) become (a c - b s, b c + a s); entries >= rotaryDim unchanged. Query row i is
  rotated at position queryOffset + i, key row j at position j; values are not rotated.
- KV cache: keys are rotated once when appended, at their cache position, and stored rotated (here: rotated
  in float64, rounded to float32, then to the cache dtype; binary16 inputs into a float16 cache without rope
  are stored as given, which that rounding leaves exact). The cache dtype rounds what is stored: float16 (binary16, nearest even), bfloat16 (upper 16 bits of the float32
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


def scaled_scores(qh, kh, o, Dh, dt):
    """scale * q.k (B, H, S, T); the default scale divides by sqrt(Dh) in float64, as the v1 reference."""
    scale = o.get('scale')
    if scale is None and dt == F64:
        return torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(Dh)
    if scale is None:
        return torch.matmul(qh, kh.transpose(-2, -1)) * float(np.float32(1.0 / math.sqrt(Dh)))
    return torch.matmul(qh, kh.transpose(-2, -1)) * scale


def visible_keys(B, S, T, pq, pk, o, mask):
    """(vis (B, 1, S, T) booleans, pi (1, 1, S, 1), pj (1, 1, 1, T)): which keys each query sees (2.3)."""
    vis = torch.ones(B, 1, S, T, dtype=torch.bool)
    if 'kvLengths' in o:
        vis = vis & (pk.reshape(1, 1, 1, T) < torch.tensor(o['kvLengths']).reshape(B, 1, 1, 1))
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
    return vis, pi, pj


def rope_tables(rotary_dim, positions, theta=10000.0, scale=1.0):
    p = torch.arange(positions, dtype=F64).unsqueeze(1)
    r = torch.arange(rotary_dim // 2, dtype=F64).unsqueeze(0)
    inv = torch.pow(torch.tensor(float(theta), dtype=F64), -2.0 * r / rotary_dim)
    ang = (p / float(scale)) * inv
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
# the v2 oracle (docs/spec.md Parts 1-3), kept as it made v2; the v3 oracle below must equal it exactly
# when no v3 option is set (self_checks)
def oracle_v2(q, k, v, H, dt, o, mask=None, bias=None):
    B, S, D = q.shape
    T = k.shape[1]
    Dh = D // H
    Hkv = o.get('numKvHeads', H)
    G = H // Hkv
    qh = q.to(dt).reshape(B, S, H, Dh).permute(0, 2, 1, 3)
    kh = k.to(dt).reshape(B, T, Hkv, Dh).permute(0, 2, 1, 3)
    vh = v.to(dt).reshape(B, T, Hkv, Dh).permute(0, 2, 1, 3)
    pq = torch.arange(S) + o.get('queryOffset', 0)
    pk = torch.arange(T)
    if G > 1:  # 2.1: query head h reads KV head h // G
        kh = kh.repeat_interleave(G, dim=1)
        vh = vh.repeat_interleave(G, dim=1)
    s = scaled_scores(qh, kh, o, Dh, dt)
    vis, pi, pj = visible_keys(B, S, T, pq, pk, o, mask)  # 2.3
    if 'softcap' in o:  # 2.4
        c = float(o['softcap'])
        s = c * torch.tanh(s / c)
    if 'alibiSlopes' in o:
        s = s - torch.tensor(o['alibiSlopes'], dtype=F32).to(dt).reshape(1, H, 1, 1) * (pi - pj).abs().to(dt)
    if bias is not None:
        s = s + bias.to(dt)
    s = s.masked_fill(~vis, NEG_INF)
    w = torch.softmax(s, dim=-1)  # 2.5
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isneginf(s).all(dim=-1, keepdim=True)
    w = w.masked_fill(empty, 0.0 if o.get('emptyRows', 'nan') == 'zero' else math.nan)
    oh = torch.matmul(w, vh)
    if o.get('emptyRows', 'nan') == 'nan':
        oh = oh.masked_fill(empty, math.nan)
    return {'out': oh.permute(0, 2, 1, 3).reshape(B, S, H * Dh), 'weights': w, 'lse': lse}


# ----------------------------------------------------------------------------------------------------
# the v3 oracle
def oracle(q, k, v, H, dt, o, mask=None, bias=None):  # v2 + the v3 options
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
    s = scaled_scores(qh, kh, o, Dh, dt)  # (B,H,S,T)
    st = {'scaled': s.clone()}
    vis, pi, pj = visible_keys(B, S, T, pq, pk, o, mask)
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
        r64 = oracle_v2(q, kk, vv, H, F64, o, mask, bias)
        r32 = oracle_v2(q, kk, vv, H, F32, o, mask, bias)
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
# ----------------------------------------------------------------------------------------------------
# v3: vHeadDim, float16 tensors, stages, sinks, rope, and the cache's rope, dtypes and ragged lengths
def f32(x):
    return float(np.float32(x))


def alibi(H):
    return [f32(2.0 ** (-8.0 * (h + 1) / H)) for h in range(H)]


STAGES = ['scaled', 'softcapped', 'biased']


def C(name, description, B, S, T, H, Dh, seed, options=None, kind='stateless', inputScale=1.0, cache=None, **extra):
    c = {'name': name, 'description': description, 'kind': kind, 'batch': B, 'seqLen': S, 'kvSeqLen': T,
         'dModel': H * Dh, 'numHeads': H, 'headDim': Dh, 'seed': seed, 'inputScale': inputScale,
         'options': options or {}}
    if cache is not None:
        c['cache'] = cache
    c.update(extra)
    return c


def rope(rotaryDim, interleaved, theta=10000.0, scale=1.0):
    return {'rotaryDim': rotaryDim, 'interleaved': interleaved, 'theta': theta, 'scale': scale}


V3_CASES = [
    # 1. vHeadDim
    C('vhead_b2_s6_h3_dh12_dv8', 'vHeadDim 8 with headDim 12: v is (2, 6, 3*8), out (2, 6, 24); scale 1/sqrt(12).',
      2, 6, 6, 3, 12, 3001, {'vHeadDim': 8}),
    C('vhead_larger_b1_s5_kv9_h2_dh8_dv20', 'vHeadDim 20 > headDim 8, cross-attention S=5, T=9, kvLengths [7].',
      1, 5, 9, 2, 8, 3002, {'vHeadDim': 20, 'kvLengths': [7]}),
    C('mla_b1_s10_h4_kv2_dh24_dv16', 'MLA-shaped (DeepSeek: Dh 192, Dv 128) scaled down: Dh 24, Dv 16, GQA 4/2, causal.',
      1, 10, 10, 4, 24, 3003, {'numKvHeads': 2, 'vHeadDim': 16, 'causal': True}),
    # 2. float16 tensors
    C('f16_b2_s7_h4_dh8', "dtype 'float16': q, k, v are binary16 (.f16 files); out64 is the float64 result rounded "
      "once to binary16; out64f32 the same rounded to float32.", 2, 7, 7, 4, 8, 3004, {'dtype': 'float16'}),
    C('f16_gqa_causal_b1_s9_h6_kv2_dh16', "dtype 'float16' with GQA 6/2, causal, inputScale 4 (binary16 outputs "
      "near 4, an ulp of 2^-8).", 1, 9, 9, 6, 16, 3005, {'dtype': 'float16', 'numKvHeads': 2, 'causal': True},
      inputScale=4.0),
    C('f16_empty_rows_b2_s5_h2_dh8', "dtype 'float16' with kvLengths [5, 0]: batch item 1 sees no key, so its "
      "binary16 out rows are NaN (0x7E00), the default emptyRows.", 2, 5, 5, 2, 8, 3006,
      {'dtype': 'float16', 'kvLengths': [5, 0]}),
    C('f16_empty_rows_zero_b1_s6_h2_dh8', "dtype 'float16', window [0, 0] with kvLengths [3] and emptyRows 'zero': "
      "rows 3-5 are 0 (binary16 0x0000).", 1, 6, 6, 2, 8, 3007,
      {'dtype': 'float16', 'kvLengths': [3], 'window': [0, 0], 'emptyRows': 'zero'}),
    # 3. stages
    C('stages_b2_s6_kv8_h3', "attentionWeights stages: softcap 4, ALiBi, a bias with -inf entries, causal "
      "lower-right (queryOffset 2) and window [3, 1]. 'scaled' and 'softcapped' hold every (i, j); 'biased' has "
      "-inf at hidden keys; 'softmax' is weights64.", 2, 6, 8, 3, 8, 3008,
      {'softcap': 4.0, 'alibiSlopes': alibi(3), 'biasShape': [2, 3, 6, 8], 'queryOffset': 2, 'causal': True,
       'window': [3, 1]}, inputScale=2.0, _biasHideP=0.15),
    # 4. sinks
    C('sinks_b2_s6_h4', 'Attention sinks [0.5, -1, 2, 0]: one extra logit per head in the softmax denominator '
      '(rows of weights sum to less than 1; lse includes the sink).', 2, 6, 6, 4, 8, 3009,
      {'sinks': [0.5, -1.0, 2.0, 0.0]}),
    C('sinks_empty_rows_b2_s6_h2', 'Sinks with rows that see no key: window [0, 0], causal, kvLengths [6, 3], so '
      'batch 1 rows 3-5 are empty: out 0 and weights 0 (the sink takes the whole mass) although emptyRows is the '
      "default 'nan'; lse of those rows is the sink. Head 1's sink 30 dominates every row (weights near "
      'exp(-30)).', 2, 6, 6, 2, 8, 3010,
      {'sinks': [-0.25, 30.0], 'window': [0, 0], 'causal': True, 'kvLengths': [6, 3]}),
    C('sinks_gqa_softcap_alibi_bias_b2_s7_kv9_h4_kv2', 'Sinks with GQA 4/2, softcap 6, ALiBi and a bias of shape '
      '[1, 4, 7, 9] (broadcast over the batch).', 2, 7, 9, 4, 8, 3011,
      {'numKvHeads': 2, 'sinks': [1.0, -2.0, 0.25, 3.0], 'softcap': 6.0, 'alibiSlopes': alibi(4),
       'biasShape': [1, 4, 7, 9]}, inputScale=2.0),
    # 5. rope
    C('rope_half_full_b2_s8_h2_dh8', 'RoPE interleaved false (Llama / NeoX rotate_half), rotaryDim = Dh = 8, '
      'theta 10000; tables of ropeTables({rotaryDim 8, positions 8}).', 2, 8, 8, 2, 8, 3012,
      {'rope': rope(8, False)}),
    C('rope_interleaved_partial_b1_s7_h3_dh12', 'RoPE interleaved true (GPT-J), rotaryDim 8 < Dh 12: entries 8-11 '
      'are not rotated; causal.', 1, 7, 7, 3, 12, 3013, {'rope': rope(8, True), 'causal': True}),
    C('rope_offset_gqa_b2_s3_kv11_h4_kv2', 'RoPE with queryOffset 8 (query row i at position 8 + i, key j at j), '
      'lower-right causal, GQA 4/2, rotaryDim 6 < Dh 8, interleaved false, theta 500000.', 2, 3, 11, 4, 8, 3014,
      {'numKvHeads': 2, 'queryOffset': 8, 'causal': True, 'rope': rope(6, False, theta=500000.0)}),
    C('rope_scaled_b1_s12_h2_dh8', 'RoPE tables with ropeTables scale 4 (linear position interpolation: angle '
      '(p / 4) * theta^(-2r/8)), interleaved true, positions 16 (more rows than needed).', 1, 12, 12, 2, 8, 3015,
      {'rope': rope(8, True, scale=4.0), 'causal': True}, _ropePositions=16),
    C('rope_realistic_b1_s32_h8_kv2_dh64', 'Realistic RoPE prefill: Dh 64, GQA 8/2, rotate_half rotaryDim 64, '
      'causal, positions 32.', 1, 32, 32, 8, 64, 3016, {'numKvHeads': 2, 'causal': True, 'rope': rope(64, False)}),
    # combinations
    C('everything_f16_b2_q4_kv12_h6_kv2_dh12_dv8', "Everything at once, dtype 'float16': GQA 6/2, vHeadDim 8 (Dh "
      '12), RoPE interleaved false rotaryDim 8, sinks, softcap 8, window [5, 0], ALiBi, lower-right causal '
      '(queryOffset 8), kvLengths [12, 10].', 2, 4, 12, 6, 12, 3017,
      {'dtype': 'float16', 'numKvHeads': 2, 'vHeadDim': 8, 'rope': rope(8, False),
       'sinks': [0.0, 1.5, -1.0, 2.5, 0.5, -3.0], 'softcap': 8.0, 'window': [5, 0], 'alibiSlopes': alibi(6),
       'queryOffset': 8, 'causal': True, 'kvLengths': [12, 10]}, inputScale=1.5),
    C('everything_f32_b2_q5_kv9_h4_kv1_dh16_dv12', 'Everything at once in float32: MQA 4/1, vHeadDim 12, RoPE '
      'interleaved true rotaryDim 10, sinks, softcap 5, bias [2, 1, 5, 9], ALiBi, window [4, 0], lower-right '
      'causal (queryOffset 4), scale 0.2.', 2, 5, 9, 4, 16, 3018,
      {'numKvHeads': 1, 'vHeadDim': 12, 'rope': rope(10, True), 'sinks': [2.0, -0.5, 0.0, 1.0], 'softcap': 5.0,
       'biasShape': [2, 1, 5, 9], 'alibiSlopes': alibi(4), 'window': [4, 0], 'queryOffset': 4, 'causal': True,
       'scale': 0.2}),
    # KV cache
    C('cache_rope_f32_b2_h4_kv2', 'KV cache float32 with RoPE (rotate_half, rotaryDim 8 = Dh): keys rotated at '
      'their cache position when appended; prefill 5, then steps 1, 2, 1 (9 tokens); tables of capacity 12 '
      'positions.', 2, 9, 9, 4, 8, 3019, {'numKvHeads': 2, 'rope': rope(8, False)}, kind='cache',
      cache={'steps': [5, 1, 2, 1], 'capacity': 12, 'dtype': 'float32'}),
    C('cache_rope_f16_interleaved_b1_h2', 'KV cache float16 with RoPE interleaved true, rotaryDim 6 < Dh 8: the '
      'rotated float32 key is rounded to binary16 when stored; prefill 6, then 3 single steps.', 1, 9, 9, 2, 8,
      3020, {'rope': rope(6, True)}, kind='cache', cache={'steps': [6, 1, 1, 1], 'capacity': 10,
                                                          'dtype': 'float16'}),
    C('cache_vhead_sinks_b2_h4_kv2_dh8_dv12', 'KV cache float32 with vHeadDim 12 (created with vHeadDim) and '
      'sinks; prefill 4, then steps 1, 1, 2.', 2, 8, 8, 4, 8, 3021,
      {'numKvHeads': 2, 'vHeadDim': 12, 'sinks': [0.5, 1.0, -1.0, 0.0]}, kind='cache',
      cache={'steps': [4, 1, 1, 2], 'capacity': 8, 'dtype': 'float32'}),
    C('cache_f16_inputs_b1_h4_kv2', "dtype 'float16' tensors into a float16 cache (stored as given, no second "
      'rounding); out is binary16; RoPE rotate_half rotaryDim 8 and window [4, 0]; prefill 3, then 4 single '
      'steps.', 1, 7, 7, 4, 8, 3022,
      {'dtype': 'float16', 'numKvHeads': 2, 'rope': rope(8, False), 'window': [4, 0]}, kind='cache',
      cache={'steps': [3, 1, 1, 1, 1], 'capacity': 8, 'dtype': 'float16'}),
    C('cache_bf16_b2_h2_kv2_dh8', "KV cache dtype 'bfloat16': k and v stored as bf16 (nearest even); kread and "
      'vread are the values read back as float32 (what cache.read returns); prefill 5, then 2 single steps; '
      'inputScale 3.', 2, 7, 7, 2, 8, 3023, {'numKvHeads': 2}, kind='cache', inputScale=3.0,
      cache={'steps': [5, 1, 1], 'capacity': 8, 'dtype': 'bfloat16'}),
    C('cache_int8_b1_h2_kv1_dh40_dv24', "KV cache dtype 'int8' (q8_0): Dh 40 = one block of 32 and a short block "
      'of 8, Dv 24 = one short block; token 2 of k is all zeros (scale 0, read back 0); kread and vread are the '
      'values read back; prefill 4, then steps 1, 1.', 1, 6, 6, 2, 40, 3024, {'numKvHeads': 1, 'vHeadDim': 24},
      kind='cache', cache={'steps': [4, 1, 1], 'capacity': 6, 'dtype': 'int8'}, _zeroKTokens=[2]),
    C('cache_ragged_rope_b3_h4_kv2', 'Sequences of different lengths in one float32 cache, RoPE rotate_half '
      'rotaryDim 8: each step gives n rows per sequence, of which newTokens[b] are real (the others are padding, '
      'not stored, out rows 0). Real rows of sequence b get positions lengths[b] + i, and out equals each '
      'sequence alone. cache.lengths after each step in cache.lengths.', 3, 9, 9, 4, 8, 3025,
      {'numKvHeads': 2, 'rope': rope(8, False)}, kind='cache',
      cache={'steps': [5, 1, 2, 1], 'newTokens': [[5, 3, 1], [1, 1, 0], [2, 0, 1], [1, 1, 1]], 'capacity': 10,
             'dtype': 'float32'}),
    C('cache_ragged_f16_sinks_window_b2_h2', 'Ragged float16 cache with sinks and window [2, 0]: newTokens per '
      'step [[4, 1], [1, 1], [0, 1], [1, 1]] (sequence 0 skips step 2).', 2, 7, 7, 2, 8, 3026,
      {'sinks': [1.0, -0.5], 'window': [2, 0]}, kind='cache',
      cache={'steps': [4, 1, 1, 1], 'newTokens': [[4, 1], [1, 1], [0, 1], [1, 1]], 'capacity': 8,
             'dtype': 'float16'}),
]


def rot_keys(k, Hkv, Dh, ro, dt):
    """k (B, T, Hkv*Dh) float32 -> keys rotated at positions 0..T-1, computed in dt, as float32."""
    B, T, _ = k.shape
    kh = k.to(dt).reshape(B, T, Hkv, Dh).permute(0, 2, 1, 3)
    kh = apply_rope(kh, torch.arange(T), ro['cos'], ro['sin'], ro.get('rotaryDim', Dh), ro.get('interleaved', False))
    return kh.permute(0, 2, 1, 3).reshape(B, T, Hkv * Dh).to(F32)


def run_case(c, q, k, v, o, bias, dt, store=None):
    """Evaluates one case in dt; for a cache, keys are rotated (if rope) and then stored in store dtype."""
    H = c['numHeads']
    Hkv = o.get('numKvHeads', H)
    Dh = c['headDim']
    Dv = o.get('vHeadDim', Dh)
    if store is None:
        return oracle(q, k, v, H, dt, o, None, bias)
    oo = dict(o)
    kk = k
    if 'rope' in o:
        kk = rot_keys(k, Hkv, Dh, o['rope'], dt)
        oo['rope'] = dict(o['rope'], keysPreRotated=True)
    kk = store_round(kk, store, Hkv, Dh)
    vv = store_round(v, store, Hkv, Dv)
    r = oracle(q, kk, vv, H, dt, oo, None, bias)
    r['kread'], r['vread'] = kk, vv
    return r


def check_stepwise(c, q, k, v, o, store, out64):
    """Replays a cache case attend by attend, per sequence (float64): each step's real rows of sequence b
    attend over its stored keys with queryOffset = lengths[b]; must match the whole-sequence out64."""
    B, H, Dh = c['batch'], c['numHeads'], c['headDim']
    Hkv = o.get('numKvHeads', H)
    Dv = o.get('vHeadDim', Dh)
    steps = c['cache']['steps']
    nt = c['cache'].get('newTokens', [[n] * B for n in steps])
    got = torch.zeros_like(out64)
    for b in range(B):
        ks, vs, L, r0 = [], [], 0, 0
        for n, tok in zip(steps, nt):
            t = tok[b]
            if t:
                kn = k[b:b + 1, r0:r0 + t]
                if 'rope' in o:  # rotate at cache positions L .. L+t-1
                    kh = kn.to(F64).reshape(1, t, Hkv, Dh).permute(0, 2, 1, 3)
                    kh = apply_rope(kh, torch.arange(L, L + t), o['rope']['cos'], o['rope']['sin'],
                                    o['rope']['rotaryDim'], o['rope']['interleaved'])
                    kn = kh.permute(0, 2, 1, 3).reshape(1, t, Hkv * Dh).to(F32)
                ks.append(store_round(kn, store, Hkv, Dh))
                vs.append(store_round(v[b:b + 1, r0:r0 + t], store, Hkv, Dv))
                oo = dict(o, queryOffset=L)
                if 'rope' in o:
                    oo['rope'] = dict(o['rope'], keysPreRotated=True)
                r = oracle(q[b:b + 1, r0:r0 + t], torch.cat(ks, 1), torch.cat(vs, 1), H, F64, oo)
                got[b, r0:r0 + t] = r['out'][0]
                L += t
            r0 += n
    assert torch.allclose(got, out64, rtol=0, atol=1e-12, equal_nan=True), ('stepwise', c['name'])


def gen_v3(outdir):
    out_cases = []
    worst = (0.0, '')
    for c0 in V3_CASES:
        c = {kk: vv for kk, vv in c0.items() if not kk.startswith('_')}
        c['options'] = dict(c0['options'])
        name = c['name']
        B, S, T, H, Dh = c['batch'], c['seqLen'], c['kvSeqLen'], c['numHeads'], c['headDim']
        o = dict(c0['options'])
        Hkv = o.get('numKvHeads', H)
        Dv = o.get('vHeadDim', Dh)
        dtype = o.get('dtype', 'float32')
        q, k, v = inputs(c['seed'], B, S, T, H * Dh, Hkv * Dh, Hkv * Dv, c['inputScale'])
        bias = None
        if 'biasShape' in o:
            bs = o.pop('biasShape')
            bias = torch.randn(*bs)
            if '_biasHideP' in c0:
                bias = bias.masked_fill(torch.rand(*bs) < c0['_biasHideP'], NEG_INF)
        for t in c0.get('_zeroKTokens', []):
            k[:, t, :] = 0.0
        if dtype == 'float16':
            q, k, v = q.half().float(), k.half().float(), v.half().float()
        files = {}
        ext = 'f16' if dtype == 'float16' else 'f32'
        write(outdir, name, 'q', ext, q, files)
        write(outdir, name, 'k', ext, k, files)
        write(outdir, name, 'v', ext, v, files)
        if bias is not None:
            write(outdir, name, 'bias', 'f32', bias, files)
        if 'rope' in o:
            ro = dict(o['rope'])
            P = c0.get('_ropePositions') or (c['cache']['capacity'] if c['kind'] == 'cache'
                                              else max(o.get('queryOffset', 0) + S, T))
            cos, sin = rope_tables(ro['rotaryDim'], P, ro['theta'], ro['scale'])
            write(outdir, name, 'ropeCos', 'f32', cos, files)
            write(outdir, name, 'ropeSin', 'f32', sin, files)
            c['options']['rope'] = dict(ro, positions=P, cos='ropeCos', sin='ropeSin')
            ro.update(cos=cos, sin=sin)
            o['rope'] = ro
        store = None
        if c['kind'] == 'cache':
            o.setdefault('causal', True)
            store = c['cache']['dtype']  # binary16 inputs into a float16 cache round exactly (stored as given)
        if c['kind'] == 'cache' and 'newTokens' in c['cache']:
            # ragged: each sequence alone, its real rows in order
            steps, nt = c['cache']['steps'], c['cache']['newTokens']
            rows = [[] for _ in range(B)]
            r0 = 0
            lengths = []
            for n, tok in zip(steps, nt):
                for b in range(B):
                    rows[b] += list(range(r0, r0 + tok[b]))
                r0 += n
                lengths.append([len(rows[b]) for b in range(B)])
            c['cache']['lengths'] = lengths
            res = {}
            for dt, key in ((F64, 64), (F32, 32)):
                out = torch.zeros(B, S, H * Dv, dtype=dt)
                for b in range(B):
                    if rows[b]:
                        idx = torch.tensor(rows[b])
                        r = run_case(c, q[b:b + 1, idx], k[b:b + 1, idx], v[b:b + 1, idx], o, None, dt, store)
                        out[b, idx] = r['out'][0]
                res[key] = {'out': out}
            r64, r32 = res[64], res[32]
        else:
            r64 = run_case(c, q, k, v, o, bias, F64, store)
            r32 = run_case(c, q, k, v, o, bias, F32, store)
        if c['kind'] == 'cache':
            check_stepwise(c, q, k, v, o, store, r64['out'])
        if dtype == 'float16':
            write(outdir, name, 'out64', 'f16', f16_round(r64['out']), files)
            write(outdir, name, 'out64f32', 'f32', r64['out'].to(F32), files)
            o64 = r64['out'].to(F32)
        else:
            write(outdir, name, 'out64', 'f32', r64['out'].to(F32), files)
            o64 = r64['out'].to(F32)
        write(outdir, name, 'out32', 'f32', r32['out'], files)
        d = (r32['out'] - o64).abs()
        d = d[torch.isfinite(d)]
        dmax = float(d.max()) if d.numel() else 0.0
        c['maxAbsOut32MinusOut64'] = dmax
        if dmax > worst[0]:
            worst = (dmax, name)
        if 'weights' in r64:
            write(outdir, name, 'weights64', 'f32', r64['weights'].to(F32), files)
            write(outdir, name, 'lse64', 'f32', r64['lse'].to(F32), files)
        if c['kind'] == 'stateless':
            for st in STAGES:
                write(outdir, name, 'stage_' + st + '64', 'f32', r64['stages'][st].to(F32), files)
        if store in ('bfloat16', 'int8'):
            write(outdir, name, 'kread', 'f32', r64['kread'], files)
            write(outdir, name, 'vread', 'f32', r64['vread'], files)
        c['files'] = files
        out_cases.append(c)
    print('v3: %d cases, largest |out32 - out64| %.3g (%s)' % (len(out_cases), worst[0], worst[1]))
    return out_cases


# ----------------------------------------------------------------------------------------------------
def naive(q, k, v, H, o, bias=None):
    """Scalar float64 loops straight from the formulas (for self_checks): out, weights, lse as nested lists."""
    B, S, D = q.shape
    T = k.shape[1]
    Dh = D // H
    Hkv = o.get('numKvHeads', H)
    Dv = o.get('vHeadDim', Dh)
    q, k, v = q.double().tolist(), k.double().tolist(), v.double().tolist()
    ro = o.get('rope')
    off = o.get('queryOffset', 0)
    scale = o.get('scale', 1.0 / math.sqrt(Dh))

    def rot(x, p):
        x = list(x)
        if ro is None:
            return x
        R = ro['rotaryDim']
        y = list(x)
        for r in range(R // 2):
            c, s = float(ro['cos'][p, r]), float(ro['sin'][p, r])
            i, j = (2 * r, 2 * r + 1) if ro['interleaved'] else (r, r + R // 2)
            y[i], y[j] = x[i] * c - x[j] * s, x[j] * c + x[i] * s
        return y
    out = [[[0.0] * (H * Dv) for _ in range(S)] for _ in range(B)]
    W = [[[[0.0] * T for _ in range(S)] for _ in range(H)] for _ in range(B)]
    L = [[[0.0] * S for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(S):
                p = off + i
                qi = rot(q[b][i][h * Dh:(h + 1) * Dh], p)
                sc = []
                for j in range(T):
                    vis = j < o.get('kvLengths', [T] * B)[b]
                    if o.get('causal') and j > p:
                        vis = False
                    if 'window' in o and not (p - o['window'][0] <= j <= p + o['window'][1]):
                        vis = False
                    kj = rot(k[b][j][g * Dh:(g + 1) * Dh], j)
                    s = scale * sum(a * c for a, c in zip(qi, kj))
                    if 'softcap' in o:
                        s = o['softcap'] * math.tanh(s / o['softcap'])
                    if 'alibiSlopes' in o:
                        s -= o['alibiSlopes'][h] * abs(p - j)
                    if bias is not None:
                        bb = bias[b % bias.shape[0], h % bias.shape[1], i, j].item()
                        s += bb
                    sc.append(s if vis else NEG_INF)
                terms = [x for x in sc if x != NEG_INF]
                sink = o['sinks'][h] if 'sinks' in o else None
                m = max(terms + ([sink] if sink is not None else []))
                den = sum(math.exp(x - m) for x in terms) + (math.exp(sink - m) if sink is not None else 0.0)
                L[b][h][i] = m + math.log(den)
                for j in range(T):
                    W[b][h][i][j] = math.exp(sc[j] - m) / den if sc[j] != NEG_INF else 0.0
                for e in range(Dv):
                    out[b][i][h * Dv + e] = sum(W[b][h][i][j] * v[b][j][g * Dv + e] for j in range(T))
    return torch.tensor(out, dtype=F64), torch.tensor(W, dtype=F64), torch.tensor(L, dtype=F64)


def self_checks():
    """The v3 oracle against the v2 oracle and its own limiting cases."""
    g = torch.Generator().manual_seed(7)

    def same(a, b):
        return torch.equal(torch.nan_to_num(a, nan=123.0), torch.nan_to_num(b, nan=123.0)) and \
            torch.equal(torch.isnan(a), torch.isnan(b))

    shapes = [(2, 5, 7, 4, 2, 8), (1, 9, 9, 6, 3, 12), (3, 4, 6, 2, 1, 5), (1, 1, 13, 8, 8, 16)]
    n = 0
    for (B, S, T, H, Hkv, Dh) in shapes:
        q = torch.randn(B, S, H * Dh, generator=g)
        k = torch.randn(B, T, Hkv * Dh, generator=g)
        v = torch.randn(B, T, Hkv * Dh, generator=g)
        bias = torch.randn(B, 1, S, T, generator=g).masked_fill(torch.rand(B, 1, S, T, generator=g) < 0.2, NEG_INF)
        mask = torch.rand(B, S, T, generator=g) < 0.7
        optsets = [{'numKvHeads': Hkv},
                   {'numKvHeads': Hkv, 'causal': True, 'queryOffset': T - S, 'softcap': 3.0},
                   {'numKvHeads': Hkv, 'window': [2, 1], 'alibiSlopes': alibi(H), 'emptyRows': 'zero',
                    'kvLengths': [T - b for b in range(B)]},
                   {'numKvHeads': Hkv, 'scale': 0.3, 'causal': True, 'window': [1, 0]}]
        for o in optsets:
            for dt in (F64, F32):
                for (m, bb) in ((None, None), (mask, bias)):
                    a = oracle(q, k, v, H, dt, o, m, bb)
                    b = oracle_v2(q, k, v, H, dt, o, m, bb)
                    assert same(a['out'], b['out']) and same(a['weights'], b['weights']) and \
                        same(a['lse'], b['lse']), ('v3 != v2', o)
                    assert same(a['stages']['softmax'], a['weights'])
                    n += 1
            # rope with zero angles (cos 1, sin 0) equals no rope
            R = Dh - (Dh % 2)
            ones, zeros = torch.ones(S + T, R // 2), torch.zeros(S + T, R // 2)
            for il in (False, True):
                a = oracle(q, k, v, H, F64, dict(o, rope={'cos': ones, 'sin': zeros, 'rotaryDim': R,
                                                         'interleaved': il}))
                b = oracle(q, k, v, H, F64, o)
                assert same(a['out'], b['out']) and same(a['weights'], b['weights']), 'rope 0'
            # sinks of -inf equal no sinks (on rows that see a key)
            a = oracle(q, k, v, H, F64, dict(o, sinks=[NEG_INF] * H))
            b = oracle(q, k, v, H, F64, o)
            ok = ~torch.isneginf(b['stages']['biased']).all(dim=-1)  # (B, H, S)
            # (equal up to the order of the softmax's float64 sum, which has one more term)
            assert torch.allclose(a['weights'][ok], b['weights'][ok], rtol=1e-14, atol=1e-300) and \
                torch.allclose(a['lse'][ok], b['lse'][ok], rtol=1e-14, atol=1e-14), 'sinks -inf'
            # vHeadDim: out of v's first Dv columns per head equals out with a v of Dv columns
            Dv = 3
            v2 = v.reshape(B, T, Hkv, Dh)[..., :Dv].reshape(B, T, Hkv * Dv)
            a = oracle(q, k, v2, H, F64, dict(o, vHeadDim=Dv))
            b = oracle(q, k, v, H, F64, o)
            assert same(a['out'], b['out'].reshape(B, S, H, Dh)[..., :Dv].reshape(B, S, H * Dv)), 'vHeadDim'
            # a sink is one more key whose value row is 0 and score is the sink
            sk = torch.randn(H, generator=g).tolist()
            a = oracle(q, k, v, H, F64, dict(o, sinks=sk))
    # the oracle against scalar loops written from the formulas, every option at once (no empty rows)
    for (B, S, T, H, Hkv, Dh, Dv, R, il) in [(2, 4, 9, 4, 2, 8, 5, 6, False), (1, 3, 7, 3, 1, 6, 9, 6, True)]:
        q = torch.randn(B, S, H * Dh, generator=g)
        k = torch.randn(B, T, Hkv * Dh, generator=g)
        v = torch.randn(B, T, Hkv * Dv, generator=g)
        bias = torch.randn(1, H, S, T, generator=g)
        cos, sin = rope_tables(R, T + S, 100.0, 2.0)
        o = {'numKvHeads': Hkv, 'vHeadDim': Dv, 'queryOffset': T - S, 'causal': True, 'window': [4, 0],
             'kvLengths': [T - b for b in range(B)], 'softcap': 4.0, 'alibiSlopes': alibi(H),
             'sinks': [0.5 * h - 1 for h in range(H)], 'scale': 0.4,
             'rope': {'cos': cos, 'sin': sin, 'rotaryDim': R, 'interleaved': il}}
        a = oracle(q, k, v, H, F64, o, None, bias)
        no, nw, nl = naive(q, k, v, H, o, bias)
        assert torch.allclose(a['out'], no, rtol=1e-12, atol=1e-13), 'naive out'
        assert torch.allclose(a['weights'], nw, rtol=1e-12, atol=1e-13), 'naive weights'
        assert torch.allclose(a['lse'], nl, rtol=1e-12, atol=1e-13), 'naive lse'
    # rope: a rotation keeps q.k when query and key sit at the same position shift (relative positions)
    cos, sin = rope_tables(8, 40)
    x = torch.randn(1, 1, 3, 8, generator=g, dtype=F64)
    y = torch.randn(1, 1, 3, 8, generator=g, dtype=F64)
    for il in (False, True):
        a = (apply_rope(x, torch.tensor([5, 6, 7]), cos, sin, 8, il) * apply_rope(y, torch.tensor([2, 3, 4]), cos, sin, 8, il)).sum(-1)
        b = (apply_rope(x, torch.tensor([25, 26, 27]), cos, sin, 8, il) * apply_rope(y, torch.tensor([22, 23, 24]), cos, sin, 8, il)).sum(-1)
        assert torch.allclose(a, b, atol=1e-5), 'rope relative'
    # sinks: the explicit formula
    s = torch.tensor([[0.3, -1.0, 2.0]]).to(F64)  # the float32 scores
    sink = 1.5
    m = max(sink, 2.0)
    w = torch.exp(s - m) / (math.exp(sink - m) + torch.exp(s - m).sum())
    qq = torch.tensor([[[1.0]]]); kk = torch.tensor([[[0.3], [-1.0], [2.0]]]); vv = torch.eye(3).reshape(1, 3, 3)
    r = oracle(qq, kk, vv.float(), 1, F64, {'sinks': [sink], 'vHeadDim': 3, 'scale': 1.0})
    assert torch.allclose(r['weights'][0, 0], w, rtol=1e-14, atol=0), "sinks formula"
    # with no option, the v2 oracle in float64 is the v1 reference (NaN bit patterns aside)
    q = torch.randn(2, 5, 12, generator=g)
    k = torch.randn(2, 7, 12, generator=g)
    v = torch.randn(2, 7, 12, generator=g)
    mask = torch.rand(2, 5, 7, generator=g) < 0.5
    for m in (None, mask):
        a, w = mha_v1(q, k, v, 3, m, F64)
        b = oracle_v2(q, k, v, 3, F64, {}, m)
        assert same(a, b['out']) and same(w, b['weights']), 'v2 == v1'
    # binary16 out64 is rounded once from float64 (a float32 step would round this tie to even, down)
    assert float(f16_round(torch.tensor([1 + 2 ** -11 + 2 ** -40], dtype=F64))[0]) == 1 + 2 ** -10
    # storage formats
    x = torch.tensor([[[1.0, -2.5, 3.14159, 1e-3] + [0.0] * 28 + [7.0, -7.0]]])
    rb = q8_0_round(x, 1, 34)
    assert float(rb[0, 0, 33]) == -7.0 and float(rb[0, 0, 32]) == 7.0
    assert bf16_round(torch.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8])).tolist() == [1.0, 1.0 + 2 ** -6]
    print('self checks: %d oracle comparisons v3 == v2, rope 0 == no rope, sinks -inf == no sinks, '
          "stage 'softmax' == weights, oracle == scalar loops: ok" % n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--set', choices=['v1', 'v2', 'v3', 'v4'])
    ap.add_argument('--out')
    ap.add_argument('--check', action='store_true', help='run the oracle self-checks only')
    a = ap.parse_args()
    if a.check or a.set is None:
        self_checks()
        import generate_v4
        generate_v4.self_checks_v4()
        if a.set is None:
            return
    src = os.path.join(HERE, a.set)
    outdir = a.out or src
    os.makedirs(outdir, exist_ok=True)
    if a.set == 'v1':
        cases = gen_v1(outdir, src)
    elif a.set == 'v2':
        cases = gen_v2(outdir, src)
    elif a.set == 'v3':
        self_checks()
        cases = gen_v3(outdir)
    else:
        import generate_v4  # imports this file as a module: v4 is the v3 oracle applied step by step
        self_checks()
        cases = generate_v4.gen_v4(outdir)
    with open(os.path.join(outdir, 'cases.json'), 'w') as f:
        json.dump(cases, f, indent=2)
        if a.set != 'v2':  # the shipped v2 file has no final newline
            f.write('\n')



if __name__ == '__main__':
    main()
