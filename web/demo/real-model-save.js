// The real-model view's Save and "Continue saved conversation" controls: what they say and when they show,
// over saved-conversations.js (IndexedDB). model-form.js asks the Worker for the state and starts the
// continued generation; this file only stores, finds and describes the saved conversation.
import { FORMAT, loadConversation, saveConversation } from './saved-conversations.js';

const kb = (bytes) => `${Math.round(bytes / 1024).toLocaleString('en-US')} KB`;

/**
 * @param {{section: HTMLElement, save: HTMLButtonElement, resume: HTMLButtonElement, status: HTMLElement}} ui
 * @returns {{refresh(model: string): Promise<object | null>, store(record: object): Promise<void>, saved: () => object | null, say(text: string): void}}
 */
export function saveControls(ui) {
  let saved = null;
  const say = (text) => {
    ui.status.textContent = text;
  };

  /** Shows the Continue button for record. */
  function offer(record) {
    saved = record;
    ui.resume.hidden = false;
    ui.resume.textContent = `Continue saved conversation (${record.tokens.length + 1} bytes, ${record.dtype})`;
    ui.resume.setAttribute(
      'aria-label',
      `continue the ${record.model} conversation saved in this browser: ${record.tokens.length + 1} bytes, ${record.dtype} cache, without a prefill`,
    );
  }

  /** Looks for `model`'s saved conversation and offers it (or says why an unusable one is ignored). */
  async function refresh(model) {
    saved = null;
    ui.resume.hidden = true;
    delete ui.section.dataset.saved;
    try {
      const { record, ignored } = await loadConversation(model);
      if (ignored) {
        say(`A conversation saved for ${model} was ignored: ${ignored}. Save a new one to replace it.`);
        ui.section.dataset.saved = 'ignored';
      } else if (record) {
        offer(record);
        ui.section.dataset.saved = 'available';
      }
    } catch (error) {
      say(`The saved conversations could not be read (IndexedDB: ${error?.message ?? error}).`);
      ui.section.dataset.saved = 'error';
    }
    return saved;
  }

  /** Stores a finished generation's record; says what was stored, or why it was not. */
  async function store(record) {
    const bytes = record.caches.reduce((sum, c) => sum + c.byteLength, 0);
    try {
      await saveConversation(record);
      offer({ ...record, format: FORMAT });
      ui.section.dataset.saved = 'stored';
      say(
        `Saved ${record.tokens.length + 1} bytes of ${record.model} in this browser (IndexedDB): ${record.caches.length} KV caches of ${record.tokens.length} tokens, ${kb(bytes)}. Reload the page to continue it without a prefill.`,
      );
    } catch (error) {
      ui.section.dataset.saved = 'error';
      say(`Not saved: IndexedDB refused it (${error?.message ?? error}).`);
    }
  }

  return { refresh, store, saved: () => saved, say };
}
