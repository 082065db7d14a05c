// What the loader needs to know about the JavaScript environment it runs in.

/** True in Node (not in a browser, a worker, or Deno/Bun with a window global). */
export function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === 'string' && typeof (globalThis as { window?: unknown }).window === 'undefined';
}

/**
 * Imports a Node built-in (`node:fs/promises`, ...). Only ever called in Node; the name is a variable and
 * the comments tell webpack and Vite not to resolve it, so bundles for the browser stay free of it.
 */
export function importNodeBuiltin<T>(name: string): Promise<T> {
  return import(/* webpackIgnore: true */ /* @vite-ignore */ name) as Promise<T>;
}
