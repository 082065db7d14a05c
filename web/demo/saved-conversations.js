// The real-model view's saved conversations, in IndexedDB: one record per model (the key), holding what the
// Worker needs to continue it without a prefill (the session state: tokens and one cache.save() per layer,
// and the token chosen last, never fed) and what the page needs to show it and sample on from where it
// stopped. Plain IndexedDB, no library.
//
// A record: { format, model, dtype, promptLength, tokens (held), pending, generated, sampling: {greedy,
// temperature, topK, seed}, caches: Uint8Array[], savedAt }. `format` changes whenever a field's meaning
// does; a record of another format is reported and left unused, never half-read.
export const FORMAT = 1;
const DB_NAME = 'mha-wasm-demo';
const STORE = 'conversations';

/** The database, created on first use (version 1: one object store keyed by the model's name). */
function openDb() {
  return new Promise((resolve, reject) => {
    if (!globalThis.indexedDB) {
      reject(new Error('this browser has no IndexedDB (a private window may disable it)'));
      return;
    }
    const request = indexedDB.open(DB_NAME, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(STORE, { keyPath: 'model' });
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error ?? new Error('IndexedDB refused to open the database'));
    request.onblocked = () => reject(new Error('IndexedDB is blocked by another tab of this page'));
  });
}

/** One request in its own transaction; resolves with its result once the transaction has committed. */
async function inStore(mode, call) {
  const db = await openDb();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const request = call(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = () => reject(tx.error ?? request.error);
      tx.onabort = () => reject(tx.error ?? new Error('the IndexedDB transaction was aborted (out of quota?)'));
    });
  } finally {
    db.close();
  }
}

/** Stores the record under record.model, replacing that model's earlier one. */
export const saveConversation = (record) => inStore('readwrite', (store) => store.put({ ...record, format: FORMAT }));

export const deleteConversation = (model) => inStore('readwrite', (store) => store.delete(model));

/** Why a stored value is not a record this page can continue, or '' when it is one. */
function problemOf(record, model) {
  if (record.format !== FORMAT)
    return `it was saved by ${record.format === undefined ? 'an older' : `another (format ${record.format})`} version of this page`;
  const byte = (t) => Number.isInteger(t) && t >= 0 && t < 256;
  if (record.model !== model || !['float32', 'float16'].includes(record.dtype))
    return 'its model or dtype is not one this page runs';
  if (!Array.isArray(record.tokens) || record.tokens.length < 1 || !record.tokens.every(byte) || !byte(record.pending))
    return 'its tokens are not bytes';
  if (!Array.isArray(record.caches) || !record.caches.every((c) => c instanceof Uint8Array))
    return 'its caches are not byte arrays';
  if (
    !Number.isInteger(record.promptLength) ||
    record.promptLength < 1 ||
    record.promptLength > record.tokens.length + 1
  )
    return 'its prompt length does not fit its tokens';
  if (!Number.isInteger(record.generated) || record.generated < 1 || typeof record.sampling !== 'object')
    return 'its sampling settings are missing';
  return '';
}

/**
 * The saved conversation of `model`: { record } when there is one this page can continue, { ignored: why }
 * for one it cannot (an older format), {} when there is none.
 */
export async function loadConversation(model) {
  const record = await inStore('readonly', (store) => store.get(model));
  if (record === undefined) return {};
  const problem = problemOf(record, model);
  return problem ? { ignored: problem } : { record };
}
