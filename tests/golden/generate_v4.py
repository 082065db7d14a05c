"""The v4 golden set (tests/golden/v4): a shared prefix, attention states and their merge, reordering the
sequences of a cache, ring caches, and the 4-bit cache. Run through generate.py (--set v4); the oracle is
generate.py's (float64 out64, float32 out32), applied per sequence and per step.

Semantics, in this file's words (docs/spec.md holds the repository's):
- A 'serving' case is a KV cache fed step by step, as a v3 cache case (steps, newTokens), with any of:
  - prefix {length Lp}: a batch-1 cache prefilled with prefixQ/K/V (its out: prefixOut64). Sequence b
    then attends over the Lp prefix keys (positions [0, Lp)) followed by its own (Lp + j); its query rows
    sit at Lp + lengths[b] + i, for causality, windows, ALiBi and RoPE.
  - cache.reorder {afterStep, indices}: after that step sequence b holds what sequence indices[b] held.
  - cache.ring: the cache keeps only its last `capacity` tokens per sequence; with a window [W, 0] and
    W + n <= capacity every step equals a plain cache with the same window (true positions everywhere).
  - cache dtype 'int4': blocks of 32 along the head dim of each token's KV-head row (the last shorter),
    scale = float32(amax) / 7 in float32 (0 when amax is 0), q = x / scale rounded half to even and
    clamped to [-7, 7], read back as float32 q * scale.
  Keys are rotated at their true position (float64 for out64, float32 for out32), rounded to float32, then
  to the cache dtype; the attention is over the values as read back. lse64 is (B, H, S), -inf on padding.
- A 'merge' case: one stateless call over a mask, and the same queries over P disjoint masks (partMask p)
  whose union is that mask; partOut p / partLse p are those partial states (float64, rounded to float32),
  and merging them (lse = ln sum exp lse_p, out = sum exp(lse_p - lse) out_p) gives out64 and lse64. A row
  empty in every part has out 0 and lse -inf (emptyRows 'zero').
"""
import math

import torch

import generate as g

F64, F32, NEG_INF = g.F64, g.F32, g.NEG_INF


def q4_round(x32, hkv, d):
    """float32 (B, T, hkv*d) -> the 4-bit cache's values read back as float32 (blocks of 32 along d)."""
    B, T, _ = x32.shape
    x = x32.reshape(B, T, hkv, d)
    out = torch.empty_like(x)
    for s0 in range(0, d, 32):
        blk = x[..., s0:s0 + 32]
        scale = blk.abs().amax(dim=-1, keepdim=True) / torch.tensor(7.0, dtype=F32)  # float32 division
        safe = torch.where(scale == 0, torch.ones_like(scale), scale)
        qv = torch.round(blk / safe).clamp(-7, 7)  # torch.round: half to even
        qv = torch.where(scale == 0, torch.zeros_like(qv), qv)
        out[..., s0:s0 + 32] = qv * scale
    return out.reshape(B, T, hkv * d)


def store(x32, dtype, hkv, d):
    y = q4_round(x32, hkv, d) if dtype == 'int4' else g.store_round(x32, dtype, hkv, d)
    # a stored integer 0 reads back as +0 (q * scale with q = -0.0 would be -0, which `read` never gives)
    return y + 0.0 if dtype in ('int8', 'int4') else y


def rotate_rows(k, pos0, Hkv, Dh, ro, dt):
    """k (1, n, Hkv*Dh) float32 -> rotated at positions pos0 .. pos0+n-1 in dt, rounded to float32."""
    if ro is None:
        return k
    n = k.shape[1]
    kh = k.to(dt).reshape(1, n, Hkv, Dh).permute(0, 2, 1, 3)
    kh = g.apply_rope(kh, torch.arange(pos0, pos0 + n), ro['cos'], ro['sin'], ro['rotaryDim'], ro['interleaved'])
    return kh.permute(0, 2, 1, 3).reshape(1, n, Hkv * Dh).to(F32)


def dims(c):
    H, Dh = c['numHeads'], c['headDim']
    Hkv = c['options'].get('numKvHeads', H)
    return H, Hkv, Dh, c['options'].get('vHeadDim', Dh)


def shifted(o, d):
    """Options for keys numbered from position d: rope tables shifted by d (keys come pre-rotated)."""
    oo = dict(o)
    if 'rope' in o:
        oo['rope'] = dict(o['rope'], cos=o['rope']['cos'][d:], sin=o['rope']['sin'][d:], keysPreRotated=True)
    return oo


def simulate(c, o, x, dt):
    """Runs a serving case step by step as the cache sees it, in dt. x: q, k, v (B, S, .) and, with a prefix,
    pq, pk, pv (1, Lp, .). Keys are stored when appended (rotated at their position, rounded to the dtype);
    a ring keeps only its last `capacity`. Returns out (B, S, H*Dv), lse (B, H, S), lengths and stored per
    step, the prefix's out and what the caches read back."""
    H, Hkv, Dh, Dv = dims(c)
    B, S = c['batch'], c['seqLen']
    cc, dtype, ro = c['cache'], c['cache']['dtype'], o.get('rope')
    ring = cc.get('ring', False)
    pre_k, pre_v = x['k'][:1, :0], x['v'][:1, :0]  # no prefix: no tokens before the sequence's own
    res = {}
    if 'prefix' in c:
        Lp = c['prefix']['length']
        pre_k = store(rotate_rows(x['pk'], 0, Hkv, Dh, ro, dt), dtype, Hkv, Dh)
        pre_v = store(x['pv'], dtype, Hkv, Dv)
        r = g.oracle(x['pq'], pre_k, pre_v, H, dt, shifted(o, 0), None, None)
        res['prefixOut'], res['prefixK'], res['prefixV'] = r['out'], pre_k, pre_v
    Lp = pre_k.shape[1]
    ks = [pre_k[:, :0].clone() for _ in range(B)]  # each sequence's stored keys, oldest first
    vs = [pre_v[:, :0].clone() for _ in range(B)]
    lengths = [0] * B
    out = torch.zeros(B, S, H * Dv, dtype=dt)
    lse = torch.full((B, H, S), NEG_INF, dtype=dt)
    res['lengths'], res['stored'] = [], []
    r0 = 0
    for t, n in enumerate(cc['steps']):
        counts = cc['newTokens'][t] if 'newTokens' in cc else [n] * B
        for b in range(B):
            m = counts[b]
            if m == 0:
                continue
            pos = Lp + lengths[b]
            kn = store(rotate_rows(x['k'][b:b + 1, r0:r0 + m], pos, Hkv, Dh, ro, dt), dtype, Hkv, Dh)
            vn = store(x['v'][b:b + 1, r0:r0 + m], dtype, Hkv, Dv)
            ks[b], vs[b] = torch.cat([ks[b], kn], 1), torch.cat([vs[b], vn], 1)
            lengths[b] += m
            dropped = 0
            if ring:  # what the ring holds after the append: the window must not reach further back
                dropped = max(0, lengths[b] - cc['capacity'])
                ks[b], vs[b] = ks[b][:, -cc['capacity']:], vs[b][:, -cc['capacity']:]
                assert o['window'][0] + m <= cc['capacity'], ('ring window', c['name'])
            keys, values = torch.cat([pre_k, ks[b]], 1), torch.cat([pre_v, vs[b]], 1)
            oo = dict(shifted(o, dropped), queryOffset=pos - dropped)
            r = g.oracle(x['q'][b:b + 1, r0:r0 + m], keys, values, H, dt, oo, None, None)
            out[b, r0:r0 + m] = r['out'][0]
            lse[b, :, r0:r0 + m] = r['lse'][0]
        r0 += n
        if 'reorder' in cc and cc['reorder']['afterStep'] == t:
            idx = cc['reorder']['indices']
            ks, vs, lengths = [ks[i] for i in idx], [vs[i] for i in idx], [lengths[i] for i in idx]
        res['lengths'].append(list(lengths))
        res['stored'].append([kk.shape[1] for kk in ks])
    res.update(out=out, lse=lse, k=ks, v=vs)
    return res


def whole_check(c, o, x, out64, lse64):
    """Each step's rows again, as one causal call over the sequence's whole history (prefix tokens, its own,
    those a reorder brought), keys rotated at positions 0..T-1 and nothing dropped (a ring's plain cache):
    must match the step-by-step float64 result."""
    H, Hkv, Dh, Dv = dims(c)
    B, cc = c['batch'], c['cache']
    ro = o.get('rope')
    pre = [('p', r) for r in range(c['prefix']['length'])] if 'prefix' in c else []
    hist = [list(pre) for _ in range(B)]

    def rows(role, toks):
        return torch.cat([(x['p' + role][:, r:r + 1] if b == 'p' else x[role][b:b + 1, r:r + 1]) for b, r in toks], 1)
    r0 = 0
    for t, n in enumerate(cc['steps']):
        counts = cc['newTokens'][t] if 'newTokens' in cc else [n] * B
        for b in range(B):
            m = counts[b]
            if m == 0:
                continue
            hist[b] += [(b, r) for r in range(r0, r0 + m)]
            T = len(hist[b])
            kk = store(rotate_rows(rows('k', hist[b]), 0, Hkv, Dh, ro, F64), cc['dtype'], Hkv, Dh)
            vv = store(rows('v', hist[b]), cc['dtype'], Hkv, Dv)
            r = g.oracle(rows('q', hist[b]), kk, vv, H, F64, shifted(o, 0), None, None)
            assert torch.allclose(r['out'][0, T - m:], out64[b, r0:r0 + m], rtol=0, atol=1e-12), ('whole', c['name'])
            assert torch.allclose(r['lse'][0, :, T - m:], lse64[b, :, r0:r0 + m], rtol=0, atol=1e-12), c['name']
        r0 += n
        if 'reorder' in cc and cc['reorder']['afterStep'] == t:
            hist = [list(hist[i]) for i in cc['reorder']['indices']]


def merge_states(outs, lses, H, Dv):
    """FlashInfer's merge_state over P parts in float64: out (B, S, H*Dv), lse (B, H, S) each."""
    L = torch.stack(lses)  # (P, B, H, S)
    lse = torch.logsumexp(L, dim=0)
    w = torch.exp(L - lse).nan_to_num(0.0)  # a row empty everywhere: -inf - -inf
    P, B, _, S = L.shape
    o = torch.stack(outs).reshape(P, B, S, H, Dv)
    out = (w.permute(0, 1, 3, 2).unsqueeze(-1) * o).sum(0)
    return out.reshape(B, S, H * Dv), lse


# ----------------------------------------------------------------------------------------------------
# the cases
def serving(name, description, B, H, Dh, seed, options, cache, prefix=None, inputScale=1.0, **extra):
    S = sum(cache['steps'])
    c = g.C(name, description, B, S, S, H, Dh, seed, options, kind='serving', inputScale=inputScale, cache=cache,
            **extra)
    if prefix is not None:
        c['prefix'] = {'length': prefix}
    return c


def stream(pattern, total):
    """Chunk sizes cycling through pattern until they add up to at least total (a ring's token stream)."""
    steps = []
    while sum(steps) < total:
        steps.append(pattern[len(steps) % len(pattern)])
    return steps


def merge(name, description, B, S, T, H, Dh, seed, options, parts, emptyRows, split=None, inputScale=1.0):
    c = g.C(name, description, B, S, T, H, Dh, seed, dict(options, emptyRows='zero'), kind='merge',
            inputScale=inputScale, parts=parts, _emptyRows=emptyRows)
    if split is not None:
        c['_split'] = split
    return c


R = g.rope
RING1 = stream([3, 1, 2, 1, 1, 3, 2], 80)
RING2 = stream([4, 1, 1, 2, 3, 1], 120)
RING3 = stream([3, 1, 2], 100)
RING4 = stream([2, 1, 1, 2], 80)
V4_CASES = [
    # shared prefix
    serving('prefix_f32_gqa_rope_ragged_b3_h4_kv2_dh8', 'Shared prefix of 6 tokens (prefixQ/K/V prefilled into a '
            'batch-1 cache, its out prefixOut64) under 3 sequences with ragged new tokens (sequence 2 has none in '
            'the first step); GQA 4/2, RoPE rotate_half at Lp + lengths[b] + i.', 3, 4, 8, 4001,
            {'numKvHeads': 2, 'rope': R(8, False)}, {'steps': [4, 1, 1, 2], 'capacity': 8, 'dtype': 'float32',
                                                     'newTokens': [[4, 2, 0], [1, 1, 1], [0, 1, 1], [2, 1, 2]]},
            prefix=6),
    serving('prefix_f16_window_softcap_alibi_b2_h4_kv2_dh8', "float16 caches (prefix and sequences) with window "
            '[5, 0] (the first rows see the end of the 9-token prefix, later ones none of it), softcap 5, ALiBi at '
            'the true distances; ragged steps.', 2, 4, 8, 4002,
            {'numKvHeads': 2, 'window': [5, 0], 'softcap': 5.0, 'alibiSlopes': g.alibi(4)},
            {'steps': [3, 1, 1, 1, 1], 'capacity': 7, 'dtype': 'float16',
             'newTokens': [[3, 1], [1, 1], [1, 0], [1, 1], [0, 1]]}, prefix=9, inputScale=2.0),
    serving('prefix_bf16_sinks_mqa_dv12_b2_h4_kv1_dh8', 'bfloat16 caches, MQA 4/1, vHeadDim 12, sinks, RoPE '
            'interleaved with rotaryDim 6 < Dh; prefix of 5 tokens.', 2, 4, 8, 4003,
            {'numKvHeads': 1, 'vHeadDim': 12, 'sinks': [0.5, -1.0, 2.0, 0.0], 'rope': R(6, True)},
            {'steps': [2, 1, 1], 'capacity': 5, 'dtype': 'bfloat16'}, prefix=5),
    serving('prefix_int8_b2_h2_kv2_dh40', 'int8 caches with Dh 40 (a block of 32 and one of 8) over a 7-token '
            'prefix; kread/vread and prefixKread/prefixVread are the values read back.', 2, 2, 40, 4004, {},
            {'steps': [3, 1, 1], 'capacity': 6, 'dtype': 'int8'}, prefix=7),
    serving('prefix_int4_gqa_rope_window_b2_h4_kv2_dh32', "int4 caches (needs dtype 'int4'): GQA 4/2, RoPE "
            'rotate_half, window [7, 0] over an 8-token prefix.', 2, 4, 32, 4005,
            {'numKvHeads': 2, 'rope': R(32, False), 'window': [7, 0]},
            {'steps': [2, 1, 1], 'capacity': 5, 'dtype': 'int4'}, prefix=8),
    # reorder
    serving('reorder_f32_rope_ragged_b4_h4_kv2_dh8', 'Beam search: ragged prefill and one step, then '
            'reorder([2, 0, 2, 1]) (sequence 2 kept twice, 3 dropped; lengths follow), then two more steps over '
            'the reordered sequences. RoPE rotate_half: keys keep the positions they were stored at.', 4, 4, 8,
            4006, {'numKvHeads': 2, 'rope': R(8, False)},
            {'steps': [5, 1, 1, 2], 'capacity': 10, 'dtype': 'float32',
             'newTokens': [[5, 3, 4, 2], [1, 1, 1, 1], [1, 1, 1, 1], [2, 1, 2, 1]],
             'reorder': {'afterStep': 1, 'indices': [2, 0, 2, 1]}}),
    serving('reorder_prefix_int8_sinks_b3_h2_kv1_dh32', 'reorder([1, 1, 0]) of an int8 cache over a 4-token '
            'shared prefix (the prefix does not move), sinks; kread/vread after the last step.', 3, 2, 32, 4007,
            {'numKvHeads': 1, 'sinks': [0.5, -1.0]},
            {'steps': [3, 1, 1], 'capacity': 6, 'dtype': 'int8', 'newTokens': [[3, 2, 1], [1, 1, 1], [1, 1, 1]],
             'reorder': {'afterStep': 1, 'indices': [1, 1, 0]}}, prefix=4),
    # ring caches
    serving('ring_f32_rope_gqa_b2_h4_kv2_dh8_c8_w5', 'Ring cache of capacity 8, window [5, 0]: %d tokens in '
            'chunks of 1-3 (wraps 10 times); every step equals a plain cache with the same window. RoPE at the '
            'true positions (tables of %d rows).' % (sum(RING1), sum(RING1)), 2, 4, 8, 4008,
            {'numKvHeads': 2, 'window': [5, 0], 'rope': R(8, False)},
            {'steps': RING1, 'capacity': 8, 'dtype': 'float32', 'ring': True}),
    serving('ring_f16_alibi_sinks_softcap_mqa_b1_h4_kv1_dh8_c12_w8', 'float16 ring of capacity 12, window [8, 0], '
            '%d tokens in chunks of 1-4; ALiBi at true distances, sinks, softcap 4, MQA.' % sum(RING2), 1, 4, 8,
            4009, {'numKvHeads': 1, 'window': [8, 0], 'alibiSlopes': g.alibi(4), 'sinks': [1.0, -0.5, 0.0, 2.0],
                   'softcap': 4.0}, {'steps': RING2, 'capacity': 12, 'dtype': 'float16', 'ring': True}),
    serving('ring_int8_ragged_b2_h2_kv2_dh40_c10_w7', 'int8 ring of capacity 10, window [7, 0], ragged: sequence 1 '
            'takes fewer tokens per step than sequence 0; Dh 40.', 2, 2, 40, 4010, {'window': [7, 0]},
            {'steps': RING3, 'capacity': 10, 'dtype': 'int8', 'ring': True,
             'newTokens': [[n, n - 1] for n in RING3]}),
    serving('ring_int4_rope_b1_h4_kv2_dh32_c8_w6', "int4 ring (needs dtype 'int4') of capacity 8, window [6, 0], "
            '%d tokens, RoPE interleaved.' % sum(RING4), 1, 4, 32, 4011,
            {'numKvHeads': 2, 'window': [6, 0], 'rope': R(32, True)},
            {'steps': RING4, 'capacity': 8, 'dtype': 'int4', 'ring': True}),
    # the 4-bit cache
    serving('int4_steps_gqa_dh40_dv24_b2_h4_kv2', "int4 cache: Dh 40 (blocks of 32 and 8), Dv 24 (one short block), "
            'GQA 4/2; key token 2 all zero (scale 0), value token 3 of sequence 0 has one value 40 beside values '
            'near 1 (they read back as 0 or one step); prefill 5, steps 1, 2, 1.', 2, 4, 40, 4012,
            {'numKvHeads': 2, 'vHeadDim': 24}, {'steps': [5, 1, 2, 1], 'capacity': 9, 'dtype': 'int4'},
            _zeroKTokens=[2], _spike=(0, 3, 5, 40.0)),
    serving('int4_mqa_window_softcap_sinks_b1_h4_kv1_dh64', 'int4 cache, MQA 4/1, Dh 64 (two full blocks), window '
            '[6, 0], softcap 5, sinks, inputScale 2; prefill 9, then 3 single steps.', 1, 4, 64, 4013,
            {'numKvHeads': 1, 'window': [6, 0], 'softcap': 5.0, 'sinks': [0.0, 1.0, -1.0, 3.0]},
            {'steps': [9, 1, 1, 1], 'capacity': 12, 'dtype': 'int4'}, inputScale=2.0),
    serving('int4_rope_ragged_b3_h4_kv2_dh32', 'int4 cache with RoPE interleaved rotaryDim 16 < Dh 32 and ragged '
            'new tokens.', 3, 4, 32, 4014, {'numKvHeads': 2, 'rope': R(16, True)},
            {'steps': [4, 1, 2, 1], 'capacity': 9, 'dtype': 'int4',
             'newTokens': [[4, 2, 1], [1, 1, 0], [2, 1, 1], [1, 1, 1]]}),
    # merge of attention states
    merge('merge_gqa_causal_rope_b2_s5_kv11_h4_kv2_dh8_p3', 'Three disjoint random key sets (partMask0-2, their '
          'union the mask) of a causal call (queryOffset 6) with GQA 4/2 and RoPE; partOut/partLse are the '
          'partial states, merging them gives out64/lse64. Row (1, 2) sees no key in any part: out 0, lse -inf; '
          'early rows are empty in some parts.', 2, 5, 11, 4, 8, 4015,
          {'numKvHeads': 2, 'causal': True, 'queryOffset': 6, 'rope': R(8, False)}, 3, [(1, 2)]),
    merge('merge_softcap_alibi_dv12_b1_s4_kv9_h2_dh8_p2', 'Two parts split at key 5 (keys [0, 5) and [5, 9)), '
          'softcap 4, ALiBi, vHeadDim 12; row 1 sees no key in either part.', 1, 4, 9, 2, 8, 4016,
          {'vHeadDim': 12, 'softcap': 4.0, 'alibiSlopes': g.alibi(2)}, 2, [(0, 1)], split=5, inputScale=2.0),
]


# ----------------------------------------------------------------------------------------------------
# writing
def rope_option(c, c0, o, files, outdir, P):
    """The case's rope tables as files (cases.json names their roles), and the tensors into the oracle's o."""
    ro = dict(o['rope'])
    cos, sin = g.rope_tables(ro['rotaryDim'], P, ro['theta'], ro['scale'])
    g.write(outdir, c['name'], 'ropeCos', 'f32', cos, files)
    g.write(outdir, c['name'], 'ropeSin', 'f32', sin, files)
    c['options']['rope'] = dict(ro, positions=P, cos='ropeCos', sin='ropeSin')
    o['rope'] = dict(ro, cos=cos, sin=sin)


def gen_serving(c0, c, outdir, files):
    name, o = c['name'], dict(c0['options'])
    H, Hkv, Dh, Dv = dims(c)
    B, S, cc = c['batch'], c['seqLen'], c['cache']
    x = dict(zip('qkv', g.inputs(c['seed'], B, S, S, H * Dh, Hkv * Dh, Hkv * Dv, c['inputScale'])))
    Lp = c.get('prefix', {}).get('length', 0)
    if Lp:  # drawn after q, k, v from the same generator
        x['pq'], x['pk'], x['pv'] = [torch.randn(1, Lp, w) * c['inputScale'] for w in (H * Dh, Hkv * Dh, Hkv * Dv)]
    for t in c0.get('_zeroKTokens', []):
        x['k'][:, t, :] = 0.0
    if '_spike' in c0:
        b, t, e, val = c0['_spike']
        x['v'][b, t, e] = val
    for role in ('q', 'k', 'v'):
        g.write(outdir, name, role, 'f32', x[role], files)
        if Lp:
            g.write(outdir, name, 'prefix' + role.upper(), 'f32', x['p' + role], files)
    if 'rope' in o:
        rope_option(c, c0, o, files, outdir, S if cc.get('ring') else Lp + cc['capacity'])
    o['causal'] = True
    r64, r32 = simulate(c, o, x, F64), simulate(c, o, x, F32)
    whole_check(c, o, x, r64['out'], r64['lse'])
    cc['lengths'] = r64['lengths']
    if cc.get('ring'):
        cc['stored'] = r64['stored']
    g.write(outdir, name, 'out64', 'f32', r64['out'].to(F32), files)
    g.write(outdir, name, 'out32', 'f32', r32['out'], files)
    g.write(outdir, name, 'lse64', 'f32', r64['lse'].to(F32), files)
    if Lp:
        g.write(outdir, name, 'prefixOut64', 'f32', r64['prefixOut'].to(F32), files)
        g.write(outdir, name, 'prefixOut32', 'f32', r32['prefixOut'], files)
    # read-back values, where they are exact: rope keys depend on how the float32 rotation rounds
    if cc['dtype'] in ('bfloat16', 'int8', 'int4') and 'rope' not in o and not cc.get('ring'):
        n = min(r64['lengths'][-1])
        g.write(outdir, name, 'kread', 'f32', torch.cat([kk[:, :n] for kk in r64['k']]), files)
        g.write(outdir, name, 'vread', 'f32', torch.cat([vv[:, :n] for vv in r64['v']]), files)
        if Lp:
            g.write(outdir, name, 'prefixKread', 'f32', r64['prefixK'], files)
            g.write(outdir, name, 'prefixVread', 'f32', r64['prefixV'], files)
    return r64['out'].to(F32), r32['out']


def gen_merge(c0, c, outdir, files):
    name, o = c['name'], dict(c0['options'])
    B, S, T, H, Dh = c['batch'], c['seqLen'], c['kvSeqLen'], c['numHeads'], c['headDim']
    Hkv, Dv, P = o.get('numKvHeads', H), o.get('vHeadDim', Dh), c['parts']
    q, k, v = g.inputs(c['seed'], B, S, T, H * Dh, Hkv * Dh, Hkv * Dv, c['inputScale'])
    if '_split' in c0:
        part = (torch.arange(T) >= c0['_split']).long().reshape(1, 1, T).expand(B, S, T)
    else:
        part = torch.randint(0, P, (B, S, T))
    mask = torch.ones(B, S, T, dtype=torch.bool)
    for (b, i) in c0['_emptyRows']:
        mask[b, i, :] = False
    for role, x in (('q', q), ('k', k), ('v', v)):
        g.write(outdir, name, role, 'f32', x, files)
    g.write(outdir, name, 'mask', 'u8', mask.to(torch.uint8), files)
    if 'rope' in o:
        rope_option(c, c0, o, files, outdir, max(o.get('queryOffset', 0) + S, T))
    r64, r32 = g.oracle(q, k, v, H, F64, o, mask), g.oracle(q, k, v, H, F32, o, mask)
    outs, lses = [], []
    for p in range(P):
        pm = (part == p) & mask
        rp = g.oracle(q, k, v, H, F64, o, pm)
        outs.append(rp['out'])
        lses.append(rp['lse'])
        g.write(outdir, name, 'partMask%d' % p, 'u8', pm.to(torch.uint8), files)
        g.write(outdir, name, 'partOut%d' % p, 'f32', rp['out'].to(F32), files)
        g.write(outdir, name, 'partLse%d' % p, 'f32', rp['lse'].to(F32), files)
    mo, ml = merge_states(outs, lses, H, Dv)
    assert torch.allclose(mo, r64['out'], rtol=0, atol=1e-12) and torch.equal(torch.isneginf(ml),
                                                                               torch.isneginf(r64['lse']))
    fin = torch.isfinite(ml)
    assert torch.allclose(ml[fin], r64['lse'][fin], rtol=0, atol=1e-12), ('merge', name)
    for (b, i) in c0['_emptyRows']:
        assert float(r64['out'][b, i].abs().max()) == 0.0 and bool(torch.isneginf(r64['lse'][b, :, i]).all())
    g.write(outdir, name, 'out64', 'f32', r64['out'].to(F32), files)
    g.write(outdir, name, 'out32', 'f32', r32['out'], files)
    g.write(outdir, name, 'lse64', 'f32', r64['lse'].to(F32), files)
    return r64['out'].to(F32), r32['out']


def gen_v4(outdir):
    self_checks_v4()
    out_cases, worst = [], (0.0, '')
    for c0 in V4_CASES:
        c = {kk: (dict(vv) if isinstance(vv, dict) else vv) for kk, vv in c0.items() if not kk.startswith('_')}
        files = {}
        o64, o32 = (gen_merge if c['kind'] == 'merge' else gen_serving)(c0, c, outdir, files)
        d = (o32 - o64).abs()
        dmax = float(d[torch.isfinite(d)].max())
        c['maxAbsOut32MinusOut64'] = dmax
        worst = max(worst, (dmax, c['name']))
        c['files'] = files
        out_cases.append(c)
    print('v4: %d cases, largest |out32 - out64| %.3g (%s)' % (len(out_cases), worst[0], worst[1]))
    return out_cases


def self_checks_v4():
    """The 4-bit rounding on hand-made blocks, the merge formula on a split of one call's keys."""
    x = torch.tensor([[[7.0, -7.0, 3.5, 2.5, 0.5, -0.5, 1.49] + [0.0] * 25 + [0.0] * 7 + [-14.0]]])
    rb = store(x, 'int4', 1, 40)[0, 0].tolist()
    assert rb[:7] == [7.0, -7.0, 4.0, 2.0, 0.0, 0.0, 1.0], rb[:7]  # half to even: 3.5 -> 4, 2.5 -> 2
    assert math.copysign(1.0, rb[5]) == 1.0  # -0.5 -> q 0, read back +0
    assert rb[32:39] == [0.0] * 7 and rb[39] == -14.0  # the short block: scale 2, -14 -> -7 * 2
    assert q4_round(torch.zeros(1, 1, 8), 1, 8).abs().max() == 0  # amax 0: scale 0, read back 0
    y = torch.tensor([[[1e-3, 50.0]]])
    assert q4_round(y, 1, 2).tolist() == [[[0.0, 50.0]]]  # beside a huge value a tiny one reads back 0
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 3, 8, generator=gen), torch.randn(1, 6, 8, generator=gen),
               torch.randn(1, 6, 8, generator=gen))
    o = {'emptyRows': 'zero'}
    whole = g.oracle(q, k, v, 2, F64, o)
    m0 = torch.arange(6).reshape(1, 1, 6).expand(1, 3, 6) < 2
    parts = [g.oracle(q, k, v, 2, F64, o, m) for m in (m0, ~m0)]
    mo, ml = merge_states([p['out'] for p in parts], [p['lse'] for p in parts], 2, 4)
    assert torch.allclose(mo, whole['out'], atol=1e-13) and torch.allclose(ml, whole['lse'], atol=1e-13)
    print('v4 self checks: int4 blocks (half to even, short block, zero block, a spike), merge of a split: ok')
