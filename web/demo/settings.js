// The synthetic view's controls: reading and validating them (messages inline, aria-invalid on the field,
// never an exception, so a half-typed value only marks the page stale) and keeping the dependent pickers
// in step with the data.
import { $, el } from './dom.js';
import { LIMITS, tokenize } from './model.js';

export const controls = {
  source: () => document.querySelector('input[name="source"]:checked').value,
  sentence: $('sentence'),
  seed: $('seed'),
  batch: $('batch'),
  seqLen: $('seqLen'),
  dModel: $('dModel'),
  numHeads: $('numHeads'),
  mask: $('mask'),
  item: $('item'),
  token: $('token'),
};

const NAMES = { batch: 'Batch', seqLen: 'Sequence length', dModel: 'd_model', numHeads: 'Heads', seed: 'Seed' };

function readInt(field, [min, max], errors) {
  const raw = controls[field].value.trim();
  const name = NAMES[field];
  if (raw === '') {
    errors.push({ field, text: `${name} is empty: enter a whole number from ${min} to ${max}.` });
    return null;
  }
  const value = Number(raw);
  if (!Number.isInteger(value)) {
    errors.push({ field, text: `${name} must be a whole number, got “${raw}”.` });
    return null;
  }
  if (value < min || value > max) {
    errors.push({ field, text: `${name} must be between ${min} and ${max} in this demo, got ${value}.` });
    return null;
  }
  return value;
}

function divisorsNear(d, limit) {
  const out = [];
  for (let h = 1; h <= Math.min(d, limit); h++) if (d % h === 0) out.push(h);
  return out;
}

/** Reads and validates the controls. Returns { errors } or { cfg }. Never throws. */
export function readSettings() {
  const errors = [];
  const source = controls.source();
  let lines = null;
  let batch;
  let seqLen;
  let seed = 0;
  if (source === 'sentence') {
    lines = tokenize(controls.sentence.value);
    if (lines.length === 0) errors.push({ field: 'sentence', text: 'Type at least one word.' });
    else if (lines.length > LIMITS.lines) {
      errors.push({ field: 'sentence', text: `Use at most ${LIMITS.lines} lines (batch items), got ${lines.length}.` });
    } else {
      const longest = Math.max(...lines.map((l) => l.length));
      if (longest > LIMITS.words) {
        errors.push({ field: 'sentence', text: `Keep each line to ${LIMITS.words} words or fewer, got ${longest}.` });
      }
      batch = lines.length;
      seqLen = longest;
    }
  } else {
    seed = readInt('seed', [0, 4294967295], errors);
    batch = readInt('batch', LIMITS.batch, errors);
    seqLen = readInt('seqLen', LIMITS.seqLen, errors);
  }
  const dModel = readInt('dModel', LIMITS.dModel, errors);
  const numHeads = readInt('numHeads', LIMITS.numHeads, errors);
  if (dModel !== null && numHeads !== null) {
    if (numHeads > dModel) {
      errors.push({
        field: 'numHeads',
        text: `Heads (${numHeads}) cannot exceed d_model (${dModel}): each head needs at least one column.`,
      });
    } else if (dModel % numHeads !== 0) {
      const lower = dModel - (dModel % numHeads);
      const options = divisorsNear(dModel, LIMITS.numHeads[1])
        .filter((h) => h > 1)
        .slice(-6);
      errors.push({
        field: 'dModel',
        text:
          `d_model ${dModel} is not divisible by ${numHeads} heads (${dModel} % ${numHeads} = ${dModel % numHeads}), ` +
          `so the columns cannot be cut into equal head slices. Try d_model ${lower || numHeads} or ${lower + numHeads}` +
          (options.length ? `, or ${options.join(', ')} heads.` : '.'),
      });
    }
  }
  if (errors.length) return { errors };
  return {
    cfg: {
      source,
      lines,
      seed,
      batch,
      seqLen,
      dModel,
      numHeads,
      headDim: dModel / numHeads,
      mask: controls.mask.value,
    },
  };
}

export function showErrors(errors) {
  const box = $('errors');
  for (const node of $('controls').querySelectorAll('[aria-invalid]')) node.removeAttribute('aria-invalid');
  box.replaceChildren();
  if (!errors.length) {
    box.hidden = true;
    document.body.classList.remove('stale');
    return;
  }
  // The options panel's fields are named by their ids (modern-options.js).
  for (const e of errors) (controls[e.field] ?? (e.field && $(e.field)))?.setAttribute('aria-invalid', 'true');
  box.append(el('strong', {}, 'Not computed: '), ...errors.map((e) => el('p', {}, e.text)));
  box.hidden = false;
  document.body.classList.add('stale');
}

/** Sentences fix batch and sequence length (lines and words): their inputs are shown but disabled. */
export function syncSourceControls() {
  const sentence = controls.source() === 'sentence';
  $('sentence-field').hidden = !sentence;
  $('seed-field').hidden = sentence;
  controls.batch.disabled = sentence;
  controls.seqLen.disabled = sentence;
}

/** Refills a picker; `keep` holds on to the chosen index while it still exists (else the first). */
export function fillSelect(select, labels, keep) {
  const value = Number(select.value);
  select.replaceChildren(...labels.map((label, i) => el('option', { value: String(i) }, label)));
  select.value = String(keep && Number.isInteger(value) && value < labels.length ? value : 0);
}
