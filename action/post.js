'use strict';
// The action's post step, which the runner runs when the job ends, passed,
// failed or cancelled: give the permit back, and say so when the hold had
// ended before, since the job's steps may then have run without it.

const semrun = require('./semrun');
const wf = require('./workflow');

// What semrun release exits with when the hold had ended before it.
const exitLost = 112;
const exitRevoked = 113;
const exitMaxRuntime = 124;

async function post() {
  const handle = wf.state('handle');
  if (!handle) {
    wf.info('semrun: no permit was taken; nothing to give back');
    return;
  }
  // Saved after the handle: a main step that failed between the two
  // saved no key.
  const key = wf.state('key') ? JSON.stringify(wf.state('key')) : '(unknown)';
  let store = {};
  try {
    store = semrun.storeSettings();
  } catch {
    // The main step took the permit with these inputs: they were good then.
  }
  // The handle goes in the environment, never in arguments.
  const env = semrun.environment({ ...store, SEMRUN_HANDLE: handle });
  const res = await semrun.run(wf.state('semrun') || 'semrun', ['release'], env);
  const line = res.lastLine;
  switch (res.code) {
    case 0:
      wf.info(`semrun: gave the permit of key ${key} back`);
      return;
    case exitLost:
    case exitMaxRuntime:
      wf.warning(line, `semrun: the job's steps may have run without the permit of key ${key}`);
      return;
    case exitRevoked:
      wf.warning(line, `semrun: an operator revoked the permit of key ${key}`);
      return;
  }
  wf.warning(
    `semrun release ${semrun.outcome(res)}${line ? `: ${line}` : ''}. The permit stays held until its keeper ends, with the job at the latest, and is free a lease later.`,
    `semrun: the permit of key ${key} was not given back`,
  );
}

post().catch((err) => {
  wf.warning(`semrun: ${err.message}`);
});
