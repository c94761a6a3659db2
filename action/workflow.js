'use strict';
// The runner's side of a step: inputs, masks, annotations, and the files
// through which a step hands variables, outputs, state and PATH to later
// steps. They are written here directly, as the runner documents them,
// rather than with the Actions toolkit (@actions/core): the formats are a
// few lines, and the action then has no dependency to install, audit or
// keep up to date.

const crypto = require('node:crypto');
const fs = require('node:fs');

// input is the value of a `with:` input, trimmed, as the runner passes it:
// INPUT_ and its name in capitals, spaces as underscores, dashes kept.
function input(name) {
  return (process.env[`INPUT_${name.replace(/ /g, '_').toUpperCase()}`] || '').trim();
}

// booleanInput reads true or false as YAML 1.2 writes them; an empty input
// is false.
function booleanInput(name) {
  const v = input(name);
  if (v === '' || ['false', 'False', 'FALSE'].includes(v)) return false;
  if (['true', 'True', 'TRUE'].includes(v)) return true;
  throw new InputError(`input ${name}: ${JSON.stringify(v)} is not true or false`);
}

// listInput is a multi-line input's lines, each trimmed, empty ones left out.
function listInput(name) {
  return input(name).split(/\r?\n/).map((s) => s.trim()).filter((s) => s !== '');
}

// InputError is a mistake in the step's inputs: the step fails with its
// message, before anything is held.
class InputError extends Error {}

// Data and properties of a workflow command are escaped so that no value
// can end the command or start another.
function escapeData(s) {
  return String(s).replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

function escapeProperty(s) {
  return escapeData(s).replace(/:/g, '%3A').replace(/,/g, '%2C');
}

// issue writes a workflow command on stdout, at once: a mask must reach the
// runner before anything that could show what it hides.
function issue(name, properties, message) {
  const props = Object.entries(properties)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${k}=${escapeProperty(v)}`)
    .join(',');
  return writeOut(`::${name}${props ? ' ' + props : ''}::${escapeData(message)}\n`);
}

const pause = new Int32Array(new SharedArrayBuffer(4));

// writeOut writes s on stdout, whole, before it returns. The runner's pipe
// may be non-blocking (node makes it so once process.stdout is used): a
// full pipe is waited for, a while. A closed stdout loses the line, and
// false says so.
function writeOut(s) {
  let b = Buffer.isBuffer(s) ? s : Buffer.from(String(s), 'utf8');
  const deadline = Date.now() + 30000;
  while (b.length > 0) {
    try {
      b = b.subarray(fs.writeSync(1, b));
    } catch (err) {
      if (err.code !== 'EAGAIN' || Date.now() > deadline) return false;
      Atomics.wait(pause, 0, 0, 10);
    }
  }
  return true;
}

// The runner reads a command from a line that starts with ::NAME:: (after
// spaces), and from ##[NAME] anywhere in a line. Text the action does not
// control (a key, what semrun says, a reason read back from Redis) could
// so end a mask before it is made, or forge an annotation: it is written
// between stop-commands and its token, which nobody can guess.
function mayBeCommand(text) {
  return /##\[|(?:^|[\r\n])[ \t]*::/.test(text);
}

// stopCommands makes the runner read what follows as plain text; the
// function it returns lets it read commands again, on a line of its own.
function stopCommands() {
  const token = `semrun-${crypto.randomUUID()}`;
  writeOut(`::stop-commands::${token}\n`);
  return () => writeOut(`::${token}::\n`);
}

function info(message) {
  if (!mayBeCommand(message)) {
    writeOut(`${message}\n`);
    return;
  }
  const resume = stopCommands();
  writeOut(`${message}\n`);
  resume();
}

// mask hides secret in the log from now on; when the runner cannot be told,
// nothing that would show the secret may follow.
function mask(secret) {
  if (secret && !issue('add-mask', {}, secret)) {
    throw new Error('stdout is closed: a secret could not be masked');
  }
}

function warning(message, title) {
  issue('warning', { title }, message);
}

function error(message, title) {
  issue('error', { title }, message);
}

// appendFileCommand adds NAME=VALUE to the runner's file for kind (ENV,
// OUTPUT, STATE) in its multi-line form, which holds any value: a
// delimiter no value contains ends it.
function appendFileCommand(kind, name, value) {
  const file = process.env[`GITHUB_${kind}`];
  if (!file) throw new Error(`GITHUB_${kind} is not set: not a step of GitHub Actions`);
  const delimiter = `ghadelimiter_${crypto.randomUUID()}`;
  value = String(value);
  if (name.includes(delimiter) || value.includes(delimiter)) {
    throw new Error(`${name}: its value holds the delimiter ${delimiter}`);
  }
  fs.appendFileSync(file, `${name}<<${delimiter}\n${value}\n${delimiter}\n`, { encoding: 'utf8' });
}

function exportVariable(name, value) {
  appendFileCommand('ENV', name, value);
}

function setOutput(name, value) {
  appendFileCommand('OUTPUT', name, value);
}

function saveState(name, value) {
  appendFileCommand('STATE', name, value);
}

// state is what the main step saved for the post step: STATE_ and its name.
function state(name) {
  return process.env[`STATE_${name}`] || '';
}

function addPath(dir) {
  const file = process.env.GITHUB_PATH;
  if (!file) throw new Error('GITHUB_PATH is not set: not a step of GitHub Actions');
  fs.appendFileSync(file, `${dir}\n`, { encoding: 'utf8' });
}

module.exports = {
  InputError,
  addPath,
  booleanInput,
  error,
  exportVariable,
  info,
  input,
  listInput,
  mask,
  saveState,
  setOutput,
  state,
  stopCommands,
  warning,
  writeOut,
};
