// server.mjs — starts `deepinfer serve` on a free loopback port for a test
// file and stops it afterwards. The binary and the model directory come from
// $DI_BIN and $DI_TEST_MODELS (tests/run.sh sets both).
import { spawn, execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.DI_BIN || path.join(root, 'build/deepinfer');
// The sanitised build (`make test` builds it): hostile-input tests run the
// server under ASan+UBSan, so a leak or UB fails its clean exit.
export const ASAN_BIN = process.env.DI_ASAN_BIN || path.join(root, 'build/asan/deepinfer');
export const MODELS = process.env.DI_TEST_MODELS || path.join(root, 'build/models');
export const MODEL = 'dsv3-tiny';
export const MODEL_DIR = path.join(MODELS, MODEL);

export async function startServer(extra = [], bin = BIN, modelDir = MODEL_DIR) {
  const format = modelDir === MODEL_DIR ? ['--format', 'deepseek-v4'] : []; // others: guessed from the model
  const args = ['serve', '--model', modelDir, '--port', '0', '--threads', '1', '--kv-memory', '64', ...format, ...extra];
  const env = { ...process.env, ASAN_OPTIONS: process.env.ASAN_OPTIONS || 'detect_leaks=1' };
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/[\d.]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${log}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    proc,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      const done = new Promise((r) => proc.on('exit', (code, sig) => r(code ?? sig)));
      proc.kill('SIGTERM');
      return done;
    },
  };
}

// `deepinfer generate` greedy output for a prompt (stdout minus the final newline).
export function offlineGreedy(prompt, maxTokens) {
  const out = execFileSync(BIN, ['generate', '--model', MODEL_DIR, '--prompt', prompt, '--max-tokens', String(maxTokens), '--threads', '1'], { stdio: ['ignore', 'pipe', 'ignore'] });
  return out.toString('utf8').replace(/\n$/, '');
}

export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const get = (name) => {
    const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
    return m ? Number(m[1]) : NaN;
  };
  return { text, get };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
