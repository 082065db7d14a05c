// Describes the machine and the build being measured (Node only).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';

export function environment(repoRoot) {
  let commit = 'unknown';
  let dirty = false;
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repoRoot, encoding: 'utf8' }).trim();
    dirty =
      execFileSync('git', ['status', '--porcelain', '--', 'src', 'web', 'dist'], {
        cwd: repoRoot,
        encoding: 'utf8',
      }).trim() !== '';
  } catch {}
  let wasmSha = 'missing';
  try {
    wasmSha = createHash('sha256')
      .update(readFileSync(new URL('dist/mha.wasm', `file://${repoRoot}/`)))
      .digest('hex');
  } catch {}
  const versions = {};
  for (const pkg of [
    'onnxruntime-web',
    '@tensorflow/tfjs-core',
    '@tensorflow/tfjs-backend-wasm',
    'onnx-proto',
    'playwright-core',
  ]) {
    try {
      versions[pkg] = JSON.parse(readFileSync(`${repoRoot}/node_modules/${pkg}/package.json`, 'utf8')).version;
    } catch {
      versions[pkg] = 'missing';
    }
  }
  return {
    date: new Date().toISOString(),
    node: process.version,
    v8: process.versions.v8,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    cpu: os.cpus()[0]?.model?.trim() ?? 'unknown',
    cores: os.cpus().length,
    lastLevelCacheBytes: lastLevelCacheBytes(),
    totalMemGiB: +(os.totalmem() / 2 ** 30).toFixed(1),
    loadAverageStart: loadAverage(),
    commit: commit + (dirty ? '+dirty' : ''),
    wasmSha,
    versions,
  };
}

/**
 * The size of CPU 0's last-level cache in bytes, from Linux's sysfs (the largest level listed), or
 * undefined where that is not readable (other systems). The bandwidth ceiling's buffer must be far larger.
 */
export function lastLevelCacheBytes() {
  const units = { K: 2 ** 10, M: 2 ** 20, G: 2 ** 30 };
  let best;
  for (let index = 0; index < 8; index++) {
    try {
      const dir = `/sys/devices/system/cpu/cpu0/cache/index${index}`;
      const level = Number(readFileSync(`${dir}/level`, 'utf8'));
      const [, count, unit] = /^(\d+)([KMG]?)/.exec(readFileSync(`${dir}/size`, 'utf8').trim()) ?? [];
      if (count === undefined) continue;
      const bytes = Number(count) * (units[unit] ?? 1);
      if (!best || level > best.level) best = { level, bytes };
    } catch {
      break;
    }
  }
  return best?.bytes;
}

/** 1/5/15-minute load averages: how busy the (shared) machine was. */
export function loadAverage() {
  return os.loadavg().map((x) => +x.toFixed(2));
}
