'use strict';
// Finding semrun: the one on PATH, else a release for this runner's system
// from the release URL, checked against the release's checksums file.

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFile, spawn } = require('node:child_process');
const { InputError, addPath, info, input, warning } = require('./workflow');

const defaultReleaseURL = 'https://github.com/semrun/semrun/releases';
// Bounds on what is downloaded: a release archive is a few megabytes.
const maxArchive = 256 << 20;
const maxChecksums = 1 << 20;
const downloadTimeout = 5 * 60 * 1000;
// `semrun version` answers at once; a semrun that does not is not one to run.
const versionTimeout = 10 * 1000;
const attempts = 3;
const versionPattern = /^[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;

const exe = process.platform === 'win32' ? 'semrun.exe' : 'semrun';

// platform is the release's name for this runner's system, as goreleaser
// names its archives.
function platform() {
  const goos = { linux: 'linux', darwin: 'darwin', win32: 'windows' }[process.platform];
  const goarch = { x64: 'amd64', arm64: 'arm64' }[process.arch];
  if (!goos || !goarch) {
    throw new Error(`no semrun release for ${process.platform}/${process.arch}: put semrun on PATH before this step`);
  }
  return { goos, goarch, ext: goos === 'windows' ? 'zip' : 'tar.gz' };
}

// semrunBinary is the path of the semrun to run: the one on PATH when no
// version is asked for or it is the one asked for, else a release
// installed in the runner's tool cache and put on PATH for later steps.
async function semrunBinary() {
  let want = input('version').replace(/^v(?=[0-9])/, '');
  if (want !== '' && want !== 'latest' && !versionPattern.test(want)) {
    throw new InputError(`input version: ${JSON.stringify(input('version'))} is not a release's version (1.2.3, or latest)`);
  }
  const base = releaseURL();
  const found = onPath();
  if (found && want === '') return found;
  if (want === '' || want === 'latest') want = await latestVersion(base);
  if (found && (await versionOf(found)) === want) return found;
  const dir = path.join(process.env.RUNNER_TOOL_CACHE || process.env.RUNNER_TEMP || os.tmpdir(), 'semrun', want, process.arch);
  const bin = path.join(dir, exe);
  if (!fs.existsSync(`${dir}.complete`) || (await versionOf(bin)) !== want) {
    await install(base, want, dir);
  }
  addPath(dir);
  process.env.PATH = `${dir}${path.delimiter}${process.env.PATH || ''}`;
  return bin;
}

function releaseURL() {
  const text = input('release-url') || defaultReleaseURL;
  let u;
  try {
    u = new URL(text);
  } catch {
    throw new InputError(`input release-url: ${JSON.stringify(text)} is not a URL`);
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') {
    throw new InputError(`input release-url: ${JSON.stringify(text)} is not an http or https URL`);
  }
  if (u.protocol === 'http:' && !['127.0.0.1', '[::1]', 'localhost'].includes(u.hostname)) {
    warning(`input release-url: ${u.origin} is plain http: whoever is on the way can change semrun and its checksums alike`);
  }
  return text.replace(/\/+$/, '');
}

// onPath is semrun's path on PATH, or '' when there is none.
function onPath() {
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    if (dir === '') continue;
    const p = path.join(dir, exe);
    try {
      if (fs.statSync(p).isFile()) {
        fs.accessSync(p, fs.constants.X_OK);
        return p;
      }
    } catch {
      // Not there, or not runnable: the next directory.
    }
  }
  return '';
}

// versionOf is the version `semrun version` prints ("semrun 1.2.3 commit
// ..."), or '' when it prints none or does not run. A semrun that does not
// answer in time is killed with whatever it started (a wrapper script's
// children, which would keep its output open), and not waited for.
function versionOf(bin) {
  return new Promise((resolve) => {
    const unix = process.platform !== 'win32';
    let child;
    try {
      child = spawn(bin, ['version'], { stdio: ['ignore', 'pipe', 'ignore'], windowsHide: true, detached: unix });
    } catch {
      resolve('');
      return;
    }
    let out = '';
    let done = false;
    const finish = (v) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(v);
    };
    const timer = setTimeout(() => {
      try {
        if (unix) process.kill(-child.pid, 'SIGKILL');
        else child.kill();
      } catch {
        // Ended already.
      }
      child.stdout.destroy();
      finish('');
    }, versionTimeout);
    child.stdout.on('data', (b) => {
      if (out.length < 64 << 10) out += b.toString('utf8');
    });
    child.on('error', () => finish(''));
    child.on('close', (code) => {
      const m = code === 0 ? /^semrun v?(\S+)/.exec(out) : null;
      finish(m ? m[1] : '');
    });
  });
}

// latestVersion is the newest release's version, from where GitHub
// redirects .../releases/latest: .../releases/tag/vX.Y.Z.
async function latestVersion(base) {
  const res = await fetchRetrying(`${base}/latest`, { redirect: 'manual' }, (r) => r.status >= 300 && r.status < 400);
  const location = res.headers.get('location') || '';
  const m = /\/tag\/v?([^/?#]+)$/.exec(location);
  if (!m || !versionPattern.test(m[1])) {
    throw new Error(`${base}/latest: no release version in its redirect (${JSON.stringify(location.slice(0, 200))}); give the input version`);
  }
  return m[1];
}

// install downloads the release archive of version, checks its SHA-256
// against the release's checksums file, and unpacks semrun into dir.
async function install(base, version, dir) {
  const { goos, goarch, ext } = platform();
  const archive = `semrun_${version}_${goos}_${goarch}.${ext}`;
  const url = `${base}/download/v${version}`;
  info(`semrun: installing ${version} from ${url}/${archive}`);
  const sums = (await download(`${url}/semrun_${version}_checksums.txt`, maxChecksums)).toString('utf8');
  const want = checksumOf(sums, archive);
  if (!want) throw new Error(`${url}/semrun_${version}_checksums.txt lists no ${archive}`);
  const data = await download(`${url}/${archive}`, maxArchive);
  const got = crypto.createHash('sha256').update(data).digest('hex');
  if (got !== want) {
    throw new Error(`${archive}: SHA-256 ${got}, but the release's checksums file says ${want}: not installed`);
  }
  const tmp = fs.mkdtempSync(path.join(process.env.RUNNER_TEMP || os.tmpdir(), 'semrun-'));
  try {
    const file = path.join(tmp, archive);
    fs.writeFileSync(file, data, { mode: 0o600 });
    // tar on the runners reads both: GNU tar on Linux, bsdtar (zip
    // included) on macOS and Windows. Only semrun's own file is unpacked.
    await execFileP(tar(), [ext === 'zip' ? '-xf' : '-xzf', file, '-C', tmp, exe]);
    const unpacked = path.join(tmp, exe);
    const st = fs.lstatSync(unpacked);
    if (!st.isFile()) throw new Error(`${archive}: ${exe} is not a regular file`);
    fs.mkdirSync(dir, { recursive: true });
    const bin = path.join(dir, exe);
    // Renamed into place, so that a job beside this one on the runner
    // never runs a semrun half copied.
    const part = `${bin}.${crypto.randomUUID()}`;
    try {
      fs.copyFileSync(unpacked, part);
      fs.chmodSync(part, 0o755);
      fs.renameSync(part, bin);
    } finally {
      fs.rmSync(part, { force: true });
    }
    const v = await versionOf(bin);
    if (v !== version) {
      throw new Error(`${archive}: its semrun says it is version ${JSON.stringify(v)}, not ${version}`);
    }
    // The tool cache's mark that dir is complete, as other setup actions
    // leave it, so a later job on this runner uses it.
    fs.writeFileSync(`${dir}.complete`, '');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

// tar is the tar that reads the release's archives: on Windows the
// system's own bsdtar, which reads zip, not a GNU tar (Git's) that may
// come first on PATH.
function tar() {
  if (process.platform !== 'win32') return 'tar';
  return path.join(process.env.SystemRoot || 'C:\\Windows', 'System32', 'tar.exe');
}

// checksumOf finds name's SHA-256 in a checksums file ("HEX  NAME" lines).
function checksumOf(sums, name) {
  for (const line of sums.split(/\r?\n/)) {
    const m = /^([0-9a-f]{64}) [ *]?(.+)$/.exec(line.trim());
    if (m && m[2] === name) return m[1];
  }
  return '';
}

// download fetches url, at most limit bytes, retrying a network fault or a
// server's error twice.
async function download(url, limit) {
  const res = await fetchRetrying(url, {}, (r) => r.ok);
  const length = Number(res.headers.get('content-length') || 0);
  if (length > limit) throw new Error(`${url}: ${length} bytes, more than the ${limit} expected`);
  const chunks = [];
  let total = 0;
  for await (const chunk of res.body) {
    total += chunk.length;
    if (total > limit) throw new Error(`${url}: more than the ${limit} bytes expected`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks.map((c) => Buffer.from(c)));
}

async function fetchRetrying(url, options, good) {
  let last;
  for (let i = 0; i < attempts; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 1000 * 2 ** (i - 1)));
    let res;
    try {
      res = await fetch(url, { ...options, signal: AbortSignal.timeout(downloadTimeout) });
    } catch (err) {
      last = new Error(`${url}: ${err.cause ? err.cause.message || err.cause : err.message}`);
      continue;
    }
    if (good(res)) return res;
    last = new Error(`${url}: HTTP ${res.status}`);
    if (res.status < 500 && res.status !== 429) break;
  }
  throw last;
}

function execFileP(cmd, args) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 120000, maxBuffer: 1 << 20, windowsHide: true }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${String(stderr).trim() || err.message}`));
      else resolve();
    });
  });
}

module.exports = { semrunBinary };
