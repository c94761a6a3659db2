'use strict';
// The action's main step: take a permit with semrun acquire, and hand its
// hold to the job's later steps and to the post step, which gives it back.

const { semrunBinary } = require('./install');
const semrun = require('./semrun');
const wf = require('./workflow');

// Bounds on a hold read back from semrun acquire --json.
const maxHandle = 64 << 10;

async function main() {
  const store = semrun.storeSettings();
  for (const secret of store.SEMRUN_REDIS_URL ? semrun.urlSecrets(store.SEMRUN_REDIS_URL) : []) {
    wf.mask(secret);
  }
  const args = semrun.acquireArgs();
  const bin = await semrunBinary();
  const res = await semrun.run(bin, args, semrun.environment(store), { capture: true });
  if (res.code !== 0) {
    // Nothing is held: acquire exits 0 only once its keeper holds the permit.
    const why = res.lastLine ? `: ${res.lastLine}` : '';
    throw new Error(`semrun acquire ${semrun.outcome(res)}${why}`);
  }
  // acquire holds the permit now: its handle, once read, is saved first,
  // so that the post step gives the permit back even when what follows
  // fails. Masked before that: GitHub shows the variables a step gets at
  // the top of its log, and whoever has the handle can run under the
  // permit and give it back.
  let hold;
  try {
    const printed = readPrinted(res.stdout, res.overflow);
    wf.mask(printed.handle);
    wf.saveState('handle', printed.handle);
    wf.saveState('semrun', bin);
    hold = checkHold(printed);
  } catch (err) {
    throw new Error(`semrun acquire: ${err.message}`);
  }
  wf.saveState('key', hold.key);

  const vars = {
    SEMRUN_HANDLE: hold.handle,
    SEMRUN_HELD_KEY: hold.key,
    SEMRUN_HELD_PERMITS: hold.permits,
    SEMRUN_FENCING_TOKEN: hold.token,
    ...store,
  };
  const outputs = { token: hold.token };
  if (hold.slots.length > 0) {
    vars.SEMRUN_SLOT = outputs.slot = hold.slots[0];
    vars.SEMRUN_SLOTS = outputs.slots = hold.slots.join(',');
  }
  if (hold.slotNames.length > 0) {
    vars.SEMRUN_SLOT_NAME = outputs['slot-name'] = hold.slotNames[0];
    vars.SEMRUN_SLOT_NAMES = outputs['slot-names'] = hold.slotNames.join(',');
  }
  for (const [k, v] of Object.entries(vars)) wf.exportVariable(k, v);
  for (const [k, v] of Object.entries(outputs)) wf.setOutput(k, v);
  const slot = hold.slots.length > 0 ? `, slot ${outputs.slots}` : '';
  const others = hold.keys.length > 1 ? ` (and ${hold.keys.slice(1).map((k) => JSON.stringify(k)).join(', ')})` : '';
  wf.info(`semrun: holding a permit of key ${JSON.stringify(hold.key)}${others}, fencing token ${hold.token}${slot}, until the job ends`);
}

const str = (s, max) => typeof s === 'string' && s !== '' && s.length <= max && !/[\u0000-\u001f\u007f]/.test(s);
const int = (n) => Number.isSafeInteger(n) && n >= 0;

// readPrinted reads what semrun acquire --json printed, as far as its
// handle: whatever is read back is checked before it is used.
function readPrinted(text, overflow) {
  let v;
  try {
    v = overflow ? null : JSON.parse(text);
  } catch {
    // Said below.
  }
  if (!v || typeof v !== 'object' || !str(v.handle, maxHandle)) {
    throw new Error('printed no handle: the permit stays held until its keeper ends, at max-runtime or with the job');
  }
  return v;
}

// checkHold checks the rest of the hold that acquire printed.
function checkHold(v) {
  if (!str(v.key, 4096) || !int(v.permits) || !int(v.token)) {
    throw new Error('printed a hold without its key, permits or fencing token; the post step gives it back');
  }
  const slots = v.slots === undefined ? [] : v.slots;
  const slotNames = v.slot_names === undefined ? [] : v.slot_names;
  if (!Array.isArray(slots) || !slots.every(int) || !Array.isArray(slotNames) || !slotNames.every((s) => str(s, 1024))) {
    throw new Error('printed a hold with malformed slots; the post step gives it back');
  }
  const keys = Array.isArray(v.keys) ? v.keys.filter((k) => k && str(k.key, 4096)).map((k) => k.key) : [v.key];
  return { handle: v.handle, key: v.key, permits: v.permits, token: v.token, slots, slotNames, keys };
}

main().catch((err) => {
  wf.error(err.message, 'semrun');
  process.exitCode = 1;
});
