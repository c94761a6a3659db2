'use strict';
// What the action asks of semrun: the settings its inputs make, and a run
// of semrun itself, whose lines reach the step's log as semrun writes them.

const { spawn } = require('node:child_process');
const { InputError, booleanInput, input, listInput, stopCommands, writeOut } = require('./workflow');

// Longest output of semrun the action reads: a hold's JSON is a few
// hundred bytes, a thousand slots' a few kilobytes.
const maxOutput = 1 << 20;

// storeSettings are the variables that name the store, from the inputs:
// the same for acquire, the steps under the hold and the release. The
// URL goes in the environment, never in arguments, which logs and `ps`
// show.
function storeSettings() {
  const url = input('redis-url');
  const local = booleanInput('local');
  if (url && local) {
    throw new InputError('inputs redis-url and local: give one of them, not both');
  }
  if (url) return { SEMRUN_REDIS_URL: url };
  if (local) return { SEMRUN_LOCAL: 'true' };
  return {};
}

// urlSecrets are the parts of a Redis URL that must be masked: its
// password, as written and as decoded.
function urlSecrets(url) {
  try {
    const { password } = new URL(url);
    if (!password) return [];
    return [...new Set([password, decodeURIComponent(password)])];
  } catch {
    // semrun refuses a malformed URL, without printing it.
    return [url];
  }
}

// acquireArgs are semrun acquire's arguments from the inputs. A value goes
// in the flag's own argument (--key=VALUE), so that a value starting with a
// dash is never read as a flag. semrun checks each value, and refuses a bad
// one naming the flag (status 125).
function acquireArgs() {
  const keys = listInput('key');
  if (keys.length === 0) throw new InputError('input key: required, one key a line');
  const args = ['acquire', '--json'];
  for (const key of keys) args.push(`--key=${key}`);
  // Given once for every key, or once for each key in order.
  for (const name of ['permits', 'weight']) {
    for (const v of input(name).split(/[\s,]+/).filter((s) => s !== '')) args.push(`--${name}=${v}`);
  }
  for (const name of ['timeout', 'max-runtime', 'label', 'priority']) {
    const v = input(name);
    if (v !== '') args.push(`--${name}=${v}`);
  }
  if (booleanInput('supersede')) args.push('--supersede');
  return args;
}

// runnerOnly are the runner's tokens, and where they are used: the Actions
// runtime's (caches, artifacts), which it gives a node action and no run
// step, and the OIDC request's. semrun uses neither, and the keeper that
// acquire leaves lives on through the job's later steps, whose processes
// can read its environment.
const runnerOnly = new Set([
  'ACTIONS_RUNTIME_URL',
  'ACTIONS_RUNTIME_TOKEN',
  'ACTIONS_CACHE_URL',
  'ACTIONS_RESULTS_URL',
  'ACTIONS_ID_TOKEN_REQUEST_URL',
  'ACTIONS_ID_TOKEN_REQUEST_TOKEN',
]);

// environment is the action's environment for semrun, less what the runner
// gave the action alone (its inputs, the Redis URL among them, the post
// step's state, and the runner's tokens), plus the store's variables.
function environment(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('INPUT_') && !k.startsWith('STATE_') && !runnerOnly.has(k)) env[k] = v;
  }
  return Object.assign(env, extra);
}

// run runs semrun with args: its stderr is copied to the step's log as it
// comes (as plain text), and kept, so that its last line can name what
// went wrong; its stdout is kept (up to maxOutput) when capture is set,
// else copied too.
// A terminating signal to the action reaches semrun, which then stops
// waiting and holds nothing; the action waits for it to end.
function run(bin, args, env, { capture = false } = {}) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true });
    } catch (err) {
      resolve({ code: null, signal: null, stdout: '', lastLine: `${bin}: ${err.message}`, overflow: false });
      return;
    }
    const out = [];
    let outLen = 0;
    let overflow = false;
    let errTail = '';
    // What semrun says names keys and repeats reasons read back from
    // Redis: the runner reads it as plain text (stopCommands), all of it
    // on stdout, so that no line of it passes the end of the window.
    let resume;
    let lineEnded = true;
    const copy = (b) => {
      if (b.length === 0) return;
      if (!resume) resume = stopCommands();
      writeOut(b);
      lineEnded = b[b.length - 1] === 0x0a;
    };
    child.stdout.on('data', (b) => {
      if (!capture) {
        copy(b);
        return;
      }
      if (outLen + b.length > maxOutput) {
        overflow = true;
        return;
      }
      out.push(b);
      outLen += b.length;
    });
    child.stderr.on('data', (b) => {
      copy(b);
      errTail = (errTail + b.toString('utf8')).slice(-8192);
    });
    const forward = (sig) => {
      try {
        child.kill(sig);
      } catch {
        // Ended already.
      }
    };
    const signals = process.platform === 'win32' ? ['SIGINT'] : ['SIGINT', 'SIGTERM', 'SIGHUP'];
    for (const sig of signals) process.on(sig, forward);
    let spawnError;
    child.on('error', (err) => {
      spawnError = err;
    });
    child.on('close', (code, signal) => {
      for (const sig of signals) process.removeListener(sig, forward);
      if (resume) {
        if (!lineEnded) writeOut('\n');
        resume();
      }
      const lines = errTail.split(/\r?\n/).filter((s) => s.trim() !== '');
      // semrun's last line says why; the annotation's title names semrun.
      let lastLine = lines.length > 0 ? lines[lines.length - 1].replace(/^semrun: /, '') : '';
      if (spawnError) {
        lastLine = spawnError.message;
        code = null;
      }
      resolve({ code, signal, stdout: Buffer.concat(out).toString('utf8'), lastLine, overflow });
    });
  });
}

// outcome says how a run of semrun ended, for a message.
function outcome(res) {
  if (res.signal) return `was killed by ${res.signal}`;
  if (res.code === null) return 'did not start';
  return `exited ${res.code}`;
}

module.exports = { acquireArgs, environment, outcome, run, storeSettings, urlSecrets };
