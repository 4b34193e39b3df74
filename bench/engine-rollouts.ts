/**
 * Rollout generation on the embedded decoder and on a vLLM server (issue 33 item 5), the same work for both: `--prompts`
 * prompts of `--prompt-tokens` random ids (±10 %), `--group` samples of each (a GRPO group: the embedded decoder
 * prefills a group's prompt once, vLLM's prefix cache may too), `--new-tokens` each at `--temperature`, no stop ids
 * (every sequence generates exactly `--new-tokens`: the same lengths on both sides). The policy is SmolLM2-135M's shape
 * with random weights (`--model DIR` loads an HF folder instead), written untied for vLLM (the form the sync writes).
 *
 * Printed: seconds and generated tokens/s per engine (vLLM timed after one warm-up request, its start-up reported
 * apart), and the largest |vLLM − embedded| log-probability of vLLM's tokens scored by the embedded model (4
 * sequences), so the speed is that of the same distribution.
 *
 *   npx tsx bench/engine-rollouts.ts [--prompts 4] [--group 8] [--prompt-tokens 650] [--new-tokens 160] [--temperature 0.7] [--threads 2] [--compile] [--model DIR]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ensureVllm } from '../scripts/ensure-vllm.mjs';
import { freePort } from '../src/infra/localInfra';
import { startVllm } from '../src/infra/vllm';
import { VllmEngine, type EngineRequest } from '../src/llm/engine';
import { loadHfCheckpoint, saveHfCheckpoint } from '../src/model/formats/checkpoint';
import { selectBackend } from '../src/model/net/backend';
import { DecodePool } from '../src/model/net/decodePool';
import { QwenModel } from '../src/model/net/qwen';
import { SMOLLM2_SHAPE } from './smollm2Shape';
import { Rng } from '../src/model/net/random';
import { policyLogprobs } from '../src/stages/rl/engineActivity';


async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      prompts: { type: 'string', default: '4' },
      group: { type: 'string', default: '8' },
      'prompt-tokens': { type: 'string', default: '650' },
      'new-tokens': { type: 'string', default: '160' },
      temperature: { type: 'string', default: '0.7' },
      threads: { type: 'string', default: String(cpus().length) },
      compile: { type: 'boolean', default: false },
      model: { type: 'string' },
    },
  });
  const [P, G, L, N, T] = [Number(values.prompts), Number(values.group), Number(values['prompt-tokens']), Number(values['new-tokens']), Number(values.temperature)];
  const backend = await selectBackend('auto', () => undefined);
  const model = values.model ? loadHfCheckpoint(values.model) : QwenModel.init(SMOLLM2_SHAPE, 7);
  const vocab = model.config.vocab_size;
  const rng = new Rng(11);
  const prompts = Array.from({ length: P }, () => Array.from({ length: Math.round(L * (0.9 + 0.2 * rng.next())) }, () => Math.floor(rng.next() * vocab)));
  const requests: EngineRequest[] = prompts.flatMap((p, i) => Array.from({ length: G }, (_, m) => ({ key: `p${i}#${m}`, tokens: p, maxNewTokens: N, seed: 1000 * i + m })));
  const promptTokens = requests.reduce((n, q) => n + q.tokens.length, 0);
  console.log(`${cpus()[0]?.model ?? 'cpu'} × ${cpus().length}, load ${loadavg()[0]!.toFixed(2)}; tfjs backend ${backend}; ${P} prompts × ${G} samples, ~${L} prompt tokens, ${N} new tokens each, T ${T}`);

  // embedded
  const pool = new DecodePool(model, 4096 * 2 ** 20);
  let t0 = Date.now();
  const mine = await pool.decode(requests, { temperature: T, topP: 1, stopTokens: [] });
  const embeddedS = (Date.now() - t0) / 1000;
  pool.dispose();
  const embeddedTokens = mine.tokens.reduce((n, t) => n + t.length, 0);

  // vLLM
  const work = mkdtempSync(path.join(tmpdir(), 'cm2-bench-engine-'));
  try {
    const dir = path.join(work, 'policy');
    saveHfCheckpoint(dir, model, { untie: true });
    const python = ensureVllm();
    if (!python) throw new Error('no vLLM environment (node scripts/ensure-vllm.mjs)');
    t0 = Date.now();
    const server = await startVllm({ python, model: dir, port: await freePort(), maxModelLen: Math.ceil((L * 1.1 + N + 16) / 256) * 256, kvCacheGiB: 4, eager: !values.compile, threads: Number(values.threads), logFile: path.join(work, 'vllm.log'), watchPid: process.pid, startTimeoutMs: 1_200_000 });
    const startS = (Date.now() - t0) / 1000;
    try {
      const engine = new VllmEngine({ baseUrl: server.url, model: 'policy', concurrency: requests.length });
      await engine.decode([{ key: 'warm', tokens: prompts[0]!.slice(0, 16), maxNewTokens: 4, seed: 1 }], { temperature: T, stopTokens: [] });
      t0 = Date.now();
      const theirs = await engine.decode(requests, { temperature: T, topP: 1, stopTokens: [] });
      const engineS = (Date.now() - t0) / 1000;
      const engineTokens = theirs.tokens.reduce((n, t) => n + t.length, 0);
      let gap = 0;
      for (let i = 0; i < Math.min(4, requests.length); i++) {
        const lp = policyLogprobs(model, requests[i]!.tokens, theirs.tokens[i]!, T);
        lp.forEach((x, k) => (gap = Math.max(gap, Math.abs(x - theirs.logprobs[i]![k]!))));
      }
      console.log('\n| engine | sequences | prompt tokens | generated tokens | seconds | generated tokens/s | start-up |');
      console.log('|---|---|---|---|---|---|---|');
      console.log(`| embedded (tfjs ${backend}, one decoding loop, shared prompts) | ${requests.length} | ${promptTokens} | ${embeddedTokens} | ${embeddedS.toFixed(1)} | ${(embeddedTokens / embeddedS).toFixed(1)} | – |`);
      console.log(`| vLLM 0.32 CPU (${values.compile ? 'compiled' : 'eager'}, ${values.threads} threads, ${requests.length} requests at once) | ${requests.length} | ${promptTokens} | ${engineTokens} | ${engineS.toFixed(1)} | ${(engineTokens / engineS).toFixed(1)} | ${startS.toFixed(0)} s |`);
      console.log(`\nlargest |vLLM − embedded| log-probability of vLLM's tokens (4 sequences): ${gap.toExponential(2)}; prompt tokens vLLM reused from its cache: ${engine.counts.reused} of ${engine.counts.reused + engine.counts.prefilled}`);
    } catch (e) {
      // the engine core's own traceback (the API server's lines after it only say that the core died)
      const lines = readFileSync(path.join(work, 'vllm.log'), 'utf8').split('\n');
      const core = lines.filter((l) => /EngineCore|Worker/.test(l) && /ERROR|Error|Killed|signal/.test(l));
      console.error(`vLLM's log (${path.join(work, 'vllm.log')}), the engine core's errors:\n${core.slice(0, 40).join('\n') || lines.slice(-40).join('\n')}`);
      throw e;
    } finally {
      await server.close();
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
    model.dispose();
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e instanceof Error ? e.stack : e);
    process.exit(1);
  },
);
