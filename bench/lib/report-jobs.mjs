// Markdown sections of the interleaved jobs (bench/lib/jobs.mjs): every ratio with its median and range
// over rounds and its target, the decode steps against their roofline, the generation loop.
import {
  LLAMA_1B,
  decodeShapeByName,
  evictionBytes,
  meets,
  ROOFLINE_TARGET,
  LOOP,
  ORT_GQA,
  PLAIN_JS,
  RAGGED,
  SAVE_LOAD,
} from './jobs.mjs';

const fmt = (x, digits = 2) => (x === undefined || x === null || !Number.isFinite(x) ? '—' : x.toFixed(digits));
const fmtMs = (x) =>
  x === undefined || !Number.isFinite(x)
    ? '—'
    : x >= 100
      ? x.toFixed(0)
      : x >= 10
        ? x.toFixed(1)
        : x >= 0.1
          ? x.toFixed(2)
          : x.toPrecision(2);
const mark = (ok) => (ok === undefined ? '' : ok ? ' ✔' : ' ✘');

/**
 * A decode row's roofline in ms: max(K/V bytes / bandwidth, FLOPs / mul+add ceiling), with the bandwidth
 * of as many threads as the row ran (1, or all threads together) and the ceiling times its threads.
 */
export function rooflineMs(row, ceiling) {
  const bw = row.threads > 1 ? ceiling?.bandwidthAllThreads?.gbps : ceiling?.bandwidth?.gbps;
  const gflops = ceiling?.gflops;
  if (!bw || !gflops) return undefined;
  const memoryMs = row.bytes / (bw * 1e6);
  const computeMs = row.flops / (gflops * row.threads * 1e6);
  return {
    ms: Math.max(memoryMs, computeMs),
    bound: memoryMs >= computeMs ? 'memory' : 'compute',
    memoryMs,
    computeMs,
  };
}

/** A job's ratio of `a` over peer `b` as "median× [min–max]", or — when the job has none. */
function against(job, a, b) {
  const r = job.ratios.find((x) => x.a === a && x.b === b);
  return r ? `${fmt(r.median)}× [${fmt(r.min)}–${fmt(r.max)}]${mark(meets(r))}` : '—';
}

/**
 * Issue #13's target that compares with peers: gqa2k (mha-wasm, 1 thread) against the best
 * onnxruntime-web row of the same attention: GroupQueryAttention on gqa2k, or the std-ops and MHA graphs
 * on gqa2k-mha (the KV heads repeated). From the matrix's rows, which ran one after the other.
 */
function peerTargets(results) {
  const ok = (impl, shape) => results.find((r) => r.impl === impl && r.shape === shape && r.status === 'ok');
  const mha = ok('mha-wasm', 'gqa2k');
  const peers = [
    ['ort-gqa', 'gqa2k'],
    ['ort-std', 'gqa2k-mha'],
    ['ort-mha', 'gqa2k-mha'],
  ]
    .map(([i, s]) => ok(i, s))
    .filter(Boolean);
  if (!mha || peers.length === 0) return [];
  const best = peers.reduce((a, b) => (b.medianMs < a.medianMs ? b : a));
  const ratio = best.medianMs / mha.medianMs;
  return [
    '## Against onnxruntime-web (rows run one after the other)',
    '',
    '| target | mha-wasm ms | best ORT row | its ms | speed | |',
    '| --- | ---: | --- | ---: | ---: | --- |',
    `| gqa2k ≥ 1.5× the best onnxruntime-web row | ${fmtMs(mha.medianMs)} | ${best.impl} on ${best.shape}${best.singleCall ? ' (one call)' : ''} | ${fmtMs(best.medianMs)} | **${fmt(ratio)}×**${mark(ratio >= 1.5)} | issue #13 |`,
    '',
  ];
}

export function jobSections(run) {
  const jobs = run.jobs ?? [];
  const lines = [...peerTargets(run.results ?? [])];
  if (jobs.length === 0) return lines;
  const ok = jobs.filter((j) => j.status === 'ok');
  const ratios = ok.flatMap((j) => j.ratios.map((r) => ({ job: j.job, ...r })));
  if (ratios.length) {
    lines.push('## Interleaved ratios (one process per job, rounds alternate A, B, B, A, ...)', '');
    lines.push(
      'Each job runs its contestants in one child process; every round times each once (a sample: the mean of enough calls for ' +
        '≥ 5 ms), in forward order on even rounds and backward on odd ones. A ratio is taken per round; the table gives its median and its ' +
        'range over the rounds. *speed*: time of B / time of A (above 1: A is faster); *time*: time of A / time of B.',
      '',
    );
    lines.push(
      '| job | A | B | | median | range | rounds | target |',
      '| --- | --- | --- | --- | ---: | ---: | ---: | --- |',
    );
    for (const r of ratios) {
      const j = ok.find((x) => x.job === r.job);
      lines.push(
        `| ${r.job} | ${r.a} | ${r.b} | ${r.speed ? 'speed' : 'time'} | **${fmt(r.median)}×**${mark(meets(r))} | ${fmt(r.min)}–${fmt(r.max)} | ${r.rounds ?? j.rounds} | ${r.target} |`,
      );
    }
    lines.push('');
  }
  const decode = ok.filter((j) => j.kind === 'decode');
  if (decode.length) {
    const c = run.ceiling;
    lines.push('## Decode steps (KV cache, one new token per step)', '');
    lines.push(
      `A cache of capacity T is filled once to T − 1 tokens; each timed step appends one token through \`cache.attend\` and ` +
        '`truncate(T − 1)` undoes it, so every step attends over T keys. Before every timed step an untimed streaming read of ' +
        `${evictionBytes(run.env?.lastLevelCacheBytes) / 2 ** 20} MiB (twice the last-level cache, 64-512 MiB) evicts ` +
        'the last-level cache, so each step reads its K and V from memory, as the layers of a model would. ORT: `com.microsoft.GroupQueryAttention` ' +
        'with past_key/past_value (B, Hkv, T − 1, Dh) fed at every step, 1 thread, its output and present K/V (B, Hkv, T, Dh) read back. ' +
        'Plain JS: scripts/lib/reference.mjs over an f32 cache (B, T, Hkv·Dh), the append included.',
      '',
    );
    lines.push(
      `GB/s = K and V bytes read (B·Hkv·T tokens × 8·Dh bytes in f32, 4·Dh in f16 and bf16, 2·Dh + 8·ceil(Dh/32) in int8) / median time. Roofline = max(K/V bytes / bandwidth, 4·B·H·T·Dh / ` +
        `mul+add ceiling), measured in this run: ${fmt(c?.bandwidth?.gbps, 1)} GB/s on 1 thread (${fmt(c?.bandwidthAllThreads?.gbps, 1)} on ` +
        `${c?.bandwidthAllThreads?.threads ?? '—'} threads for the 2-thread rows), ${fmt(c?.gflops, 1)} GFLOP/s per thread. ` +
        `Target: every mha-wasm row, 1 thread, at least ${ROOFLINE_TARGET * 100} % of its roofline.`,
      '',
    );
    lines.push(
      "The ratio columns: the peer's step time / this row's, per round (median [range]); targets in the table above.",
      '',
    );
    lines.push(
      '| shape (B,T,H,Hkv,Dh) | contestant | step ms (median) | range | GB/s | roofline ms | % roofline | × ORT GQA | × plain JS | first call ms | check (max abs err) |',
    );
    lines.push('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |');
    for (const j of decode) {
      const s = decodeShapeByName(j.job);
      for (const row of j.contestants) {
        const roof = rooflineMs(row, c);
        const share = roof ? roof.ms / row.medianMs : undefined;
        const target =
          row.name.startsWith('mha-wasm') && row.threads === 1 && share !== undefined
            ? mark(share >= ROOFLINE_TARGET)
            : '';
        lines.push(
          `| ${j.job} (${s.B},${s.T},${s.H},${s.Hkv},${s.Dh}) | ${row.name} | ${fmtMs(row.medianMs)} | ${fmtMs(row.minMs)}–${fmtMs(row.maxMs)} | ` +
            `${fmt(row.bytes / (row.medianMs * 1e6), 1)} | ${roof ? `${fmtMs(roof.ms)} (${roof.bound})` : '—'} | ${share !== undefined ? `${fmt(100 * share, 0)} %${target}` : '—'} | ` +
            `${against(j, row.name, ORT_GQA)} | ${against(j, row.name, PLAIN_JS)} | ` +
            `${fmtMs(row.firstCallMs)} | ${row.check?.ok ? 'pass' : 'FAIL'} ${row.check ? row.check.maxAbsErr.toExponential(1) : ''} |`,
        );
      }
    }
    lines.push('', 'f16 rows are checked against the reference over the binary16-rounded K and V.', '');
  }
  lines.push(...servingSections(ok, run.ceiling));
  const loop = ok.find((j) => j.kind === 'loop');
  if (loop) {
    lines.push(
      `## Generation loop (B ${LOOP.B}, H ${LOOP.H}, Hkv ${LOOP.Hkv}, Dh ${LOOP.Dh}: a prefill of ${LOOP.prefill} tokens, then ${LOOP.steps} single-token steps)`,
      '',
    );
    lines.push(
      'Attention alone, one layer: the cache stays in the last-level cache between steps (no eviction). tokens/s = steps / their time; ' +
        'the prefill is timed apart (median over every call, warm-up included).',
      '',
    );
    lines.push(
      '| cache | tokens/s (median) | range | steps ms | prefill ms | check |',
      '| --- | ---: | ---: | ---: | ---: | --- |',
    );
    for (const row of loop.contestants) {
      const tps = (ms) => (1000 * LOOP.steps) / ms;
      lines.push(
        `| ${row.name} | **${fmt(tps(row.medianMs), 0)}** | ${fmt(tps(row.maxMs), 0)}–${fmt(tps(row.minMs), 0)} | ${fmtMs(row.medianMs)} | ${fmtMs(row.prefillMs?.median)} | ${row.check?.ok ? 'pass' : 'FAIL'} |`,
      );
    }
    lines.push('');
  }
  const bad = jobs.filter((j) => j.status !== 'ok' || j.failed?.length);
  if (bad.length) {
    lines.push('## Job failures', '');
    for (const j of bad) {
      if (j.status !== 'ok')
        lines.push(
          `- **${j.job}**: ${j.status}${j.phase ? ` (phase ${j.phase})` : ''}: \`${String(j.error ?? '')
            .replace(/`/g, "'")
            .slice(0, 400)}\``,
        );
      for (const f of j.failed ?? [])
        lines.push(`- **${j.job} / ${f.name}**: \`${String(f.error).replace(/`/g, "'").slice(0, 400)}\``);
    }
    lines.push('');
  }
  return lines;
}

/** The shared-prefix jobs (docs/spec.md 5.2): each contestant's step, the bytes it reads and holds. */
function prefixSection(jobs, c) {
  if (!jobs.length) return [];
  const lines = ["## Serving: a shared prefix, beam search's reorder, a ring cache (1 thread)", ''];
  lines.push(
    'prefix-*: one decode step of 4 sequences with 64 tokens of their own each: over a batch-1 prefix cache (`prefix`), as one ' +
      'sequence of as many keys as one of them sees, and as 4 sequences that each store the prompt. beam-reorder: the step of ' +
      "prefix-mha-8k's 4 sequences and a reorder that moves all of them (bytes: read and written). ring-1k: a step of a ring of " +
      '1024 tokens that has seen 16384, and of a plain cache of 1024. The last-level cache is evicted before every run. ' +
      `GB/s = K and V bytes the row must read / median time; the 1-thread read bandwidth of this run: ${fmt(c?.bandwidth?.gbps, 1)} GB/s.`,
    '',
  );
  lines.push(
    '| job | contestant | step ms (median) | range | K/V bytes read | GB/s | bytes held | check (max abs err) |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |',
  );
  for (const j of jobs) {
    for (const row of j.contestants) {
      lines.push(
        `| ${j.job} | ${row.name} | ${fmtMs(row.medianMs)} | ${fmtMs(row.minMs)}–${fmtMs(row.maxMs)} | ${(row.bytes / 2 ** 20).toFixed(1)} MiB | ` +
          `${fmt(row.bytes / (row.medianMs * 1e6), 1)} | ${((row.info?.bytesHeld ?? NaN) / 2 ** 20).toFixed(1)} MiB | ` +
          `${row.check?.ok ? 'pass' : 'FAIL'} ${row.check?.maxAbsErr?.toExponential(1) ?? ''} |`,
      );
    }
  }
  lines.push('');
  return lines;
}

/** samples-tiny-llama: the model's tokens/s drawing 4 samples over the prompt held once, and separately. */
function samplesSection(job) {
  if (!job) return [];
  const info = job.contestants[0]?.info ?? {};
  const lines = [
    `## tiny-llama: ${info.samples} samples of ${info.tokens} bytes after a ${info.promptTokens}-byte prompt (1 thread, the whole model)`,
    '',
    '| contestant | ms per batch (median) | range | tokens/s | check |',
    '| --- | ---: | ---: | ---: | --- |',
  ];
  for (const row of job.contestants) {
    const perSecond = (ms) => fmt((1000 * info.samples * info.tokens) / ms, 0);
    lines.push(
      `| ${row.name} | ${fmtMs(row.medianMs)} | ${fmtMs(row.minMs)}–${fmtMs(row.maxMs)} | ${perSecond(row.medianMs)} | ` +
        `${row.check?.ok ? 'pass (the same bytes)' : 'FAIL'} |`,
    );
  }
  lines.push('');
  return lines;
}

/** The serving cache's jobs (issue #31): the ragged step's rows against the bandwidth, save/load's bytes and speed. */
function servingSections(ok, c) {
  const lines = [];
  const ragged = ok.find((j) => j.kind === 'ragged');
  if (ragged) {
    lines.push(
      `## Ragged decode (H ${RAGGED.H}, Hkv ${RAGGED.Hkv}, Dh ${RAGGED.Dh}: sequences of ${RAGGED.lengths.join(', ')} keys, float32, 1 thread)`,
      '',
    );
    lines.push(
      'One step of 4 sequences: one cache with `newTokens`, the same steps in four batch-1 caches one after another, and one cache ' +
        'with all four padded to 4096 keys. The last-level cache is evicted before each step, as in the decode steps. GB/s = K and V bytes the ' +
        `row must read / median time; the 1-thread read bandwidth of this run: ${fmt(c?.bandwidth?.gbps, 1)} GB/s.`,
      '',
    );
    lines.push(
      '| contestant | step ms (median) | range | K/V bytes | GB/s | check (max abs err) |',
      '| --- | ---: | ---: | ---: | ---: | --- |',
    );
    for (const row of ragged.contestants) {
      lines.push(
        `| ${row.name} | ${fmtMs(row.medianMs)} | ${fmtMs(row.minMs)}–${fmtMs(row.maxMs)} | ${(row.bytes / 2 ** 20).toFixed(1)} MiB | ` +
          `${fmt(row.bytes / (row.medianMs * 1e6), 1)} | ${row.check?.ok ? 'pass' : 'FAIL'} ${row.check?.maxAbsErr?.toExponential(1) ?? ''} |`,
      );
    }
    lines.push('');
  }
  lines.push(
    ...prefixSection(
      ok.filter((j) => ['prefix', 'reorder', 'ring'].includes(j.kind)),
      c,
    ),
  );
  lines.push(...samplesSection(ok.find((j) => j.kind === 'samples')));
  lines.push(...contextSection(ok.find((j) => j.kind === 'context')));
  lines.push(...bitsSection(ok.find((j) => j.kind === 'bits')));
  const io = ok.find((j) => j.kind === 'saveload');
  if (io) {
    const info = io.contestants.find((r) => r.info?.savedBytes)?.info ?? {};
    lines.push(
      `## Saving and loading caches (${SAVE_LOAD.caches} float16 caches of ${SAVE_LOAD.tokens} tokens, Hkv ${SAVE_LOAD.Hkv}, Dh ${SAVE_LOAD.Dh})`,
      '',
    );
    lines.push(
      `Saved bytes ${info.savedBytes ?? '—'} for ${info.rawBytes ?? '—'} bytes of stored tokens: **${fmt(info.bytesPerRaw, 4)}×** the raw size` +
        `${mark(info.bytesPerRaw === undefined ? undefined : info.bytesPerRaw <= 1.01)} (target ≤ 1.01×). The copy row is \`Uint8Array.set\` of the ` +
        'same bytes: the memory-bandwidth ceiling of a save (one read of the cache, one write of the bytes) or a load.',
      '',
    );
    lines.push(
      '| contestant | ms (median, all caches) | range | GB/s of stored tokens | check |',
      '| --- | ---: | ---: | ---: | --- |',
    );
    for (const row of io.contestants) {
      lines.push(
        `| ${row.name} | ${fmtMs(row.medianMs)} | ${fmtMs(row.minMs)}–${fmtMs(row.maxMs)} | ${fmt(row.bytes / (row.medianMs * 1e6), 1)} | ${row.check?.ok ? 'pass' : 'FAIL'} |`,
      );
    }
    lines.push('');
  }
  return lines;
}

/** Issue 40: models/tiny-llama's validation bits per byte per cache dtype and arithmetic (jobs-bits.mjs). */
function bitsSection(job) {
  if (!job?.rows) return [];
  const lines = [
    "## models/tiny-llama's validation bits per byte, per KV cache dtype and arithmetic",
    '',
    `The first ${job.rows[0]?.bytes ?? '?'} bytes of the model's held-out split (models/tiny-llama/val-sample.txt), in ` +
      'windows of 256 bytes each from an empty cache, as tools/train.py scores validation. Not timed.',
    '',
    '| dtype | arithmetic | bits per byte | over float32 | target |',
    '| --- | --- | ---: | ---: | --- |',
  ];
  for (const r of job.rows) {
    const target = r.target === undefined ? '—' : `<= +${(100 * r.target).toFixed(1)}% ${r.pass ? '✔' : '✘'}`;
    lines.push(
      `| ${r.dtype} | ${r.arithmetic} | ${r.bitsPerByte.toFixed(4)} | ${r.increase >= 0 ? '+' : ''}${(100 * r.increase).toFixed(3)}% | ${target} |`,
    );
  }
  lines.push('');
  return lines;
}

/** Issue #32: the longest context of a Llama-3.2-1B-shaped cache per dtype (jobs-context.mjs). */
export function contextSection(job) {
  if (!job?.rows) return [];
  const { layers, Hkv, Dh } = LLAMA_1B;
  const lines = [
    `## Longest context in one instance (Llama-3.2-1B-shaped: ${layers} layers, Hkv ${Hkv}, Dh ${Dh}, B 1)`,
    '',
  ];
  lines.push(
    `Measured: the largest capacity (a multiple of 32) for which ${layers} caches, one per layer, exist at once in a fresh ` +
      'instance and take a step, found by creating, stepping and freeing them through the public API; then caches of that ' +
      'capacity are filled to their last position (32-token appends whose queries see only themselves) and stepped ' +
      "there, 32 query heads over every stored token. The module's wasm memory may grow to 4 GiB (wasm32's limit).",
    '',
  );
  lines.push(
    '| dtype | bytes per token (all layers) | longest context (measured) | its cache bytes | wasm memory then | ' +
      'stepped at position | that step, 16 layers |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const r of job.rows) {
    lines.push(
      `| ${r.dtype} | ${r.bytesPerToken} | **${r.tokens}** | ${(r.cacheBytes / 2 ** 20).toFixed(0)} MiB | ` +
        `${(r.wasmMemoryBytes / 2 ** 20).toFixed(0)} MiB | ${r.steppedAt ?? 'failed'} | ` +
        `${r.lastStepMs == null ? '-' : `${r.lastStepMs.toFixed(1)} ms`} |`,
    );
  }
  lines.push('');
  return lines;
}
