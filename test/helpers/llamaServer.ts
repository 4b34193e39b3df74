/**
 * A real OpenAI-compatible LLM server for the tests: llama.cpp's `llama-server` (built from PyPI's llama-cpp-python
 * source distribution by scripts/ensure-llama-server.mjs) serving SmolLM2-135M-Instruct (the GGUF of
 * scripts/ensure-smollm2.mjs). Both are cached per machine; `.ci/run` fetches/builds them and sets
 * CM2_REQUIRE_REAL_LLM=1, so in CI a missing one fails the tests instead of skipping them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/infra/localInfra';
import { llamaServerPath } from '../../scripts/ensure-llama-server.mjs';
import { smollm2Path } from '../../scripts/ensure-smollm2.mjs';

export interface LlamaServer {
  /** Base URL of the OpenAI-compatible API (…/v1). */
  url: string;
  /** The model name the server answers as. */
  model: string;
  pid: number;
  logFile: string;
  close(): Promise<void>;
}

async function paths(): Promise<{ bin: string; gguf: string }> {
  return { bin: llamaServerPath(), gguf: smollm2Path() };
}

/** Why the real-server tests cannot run here, or undefined when they can. Throws instead when CI requires them. */
export async function llamaServerUnavailable(): Promise<string | undefined> {
  const { bin, gguf } = await paths();
  const missing = [
    ...(existsSync(bin) ? [] : [`llama-server (${bin}; node scripts/ensure-llama-server.mjs builds it)`]),
    ...(existsSync(gguf) ? [] : [`SmolLM2 GGUF (${gguf}; node scripts/ensure-smollm2.mjs fetches it)`]),
  ];
  if (missing.length === 0) return undefined;
  const reason = `missing ${missing.join(' and ')}`;
  if (process.env['CM2_REQUIRE_REAL_LLM'] === '1') throw new Error(`CM2_REQUIRE_REAL_LLM=1 but ${reason}`);
  return reason;
}

/** Starts llama-server on a free port and waits until it answers /health with the model loaded. */
export async function startLlamaServer(opts: { ctxSize?: number; parallel?: number; threads?: number; chatTemplateFile?: string } = {}): Promise<LlamaServer> {
  const { bin, gguf } = await paths();
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-llamasrv-'));
  const logFile = path.join(dir, 'llama-server.log');
  const model = 'smollm2-135m-instruct';
  const parallel = opts.parallel ?? 2;
  const args = [
    '-m', gguf, '--host', '127.0.0.1', '--port', String(port), '--alias', model,
    // The context is split among the parallel slots: each slot gets ctxSize / parallel tokens.
    '-c', String((opts.ctxSize ?? 4096) * parallel), '-np', String(parallel), '-t', String(opts.threads ?? 2),
    '--jinja', '--no-webui',
    // A template of our own instead of the GGUF's (SmolLM2's has no tool-call format).
    ...(opts.chatTemplateFile ? ['--chat-template-file', opts.chatTemplateFile] : []),
  ];
  const fd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(bin, args, { stdio: ['ignore', fd, fd] });
  } finally {
    closeSync(fd);
  }
  const pid = child.pid;
  if (!pid) throw new Error(`could not start ${bin}`);
  // The server must not outlive this test process, however it ends: a test file killed at its timeout runs no
  // `after` hook, and an orphaned server kept two cores busy under every later test. A detached watchdog kills it
  // within 2 s of this process's death (and ends by itself once the server is gone).
  const watchdog = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 2; done; kill -9 ${pid} 2>/dev/null`], { stdio: 'ignore', detached: true });
  watchdog.unref();
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (exited !== undefined) throw new Error(`llama-server exited (${exited}) during start-up:\n${readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n')}`);
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      watchdog.kill();
      throw new Error(`llama-server did not become healthy in 120 s (log: ${logFile})`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    url: `${url}/v1`,
    model,
    pid,
    logFile,
    close: () =>
      new Promise<void>((resolve) => {
        watchdog.kill();
        if (exited !== undefined) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5000).unref();
      }),
  };
}
