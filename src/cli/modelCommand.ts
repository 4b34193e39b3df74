/** `cm2 model …`: inspect a Qwen2/Qwen3 HF checkpoint with the tfjs model. */
import { selectBackend, type BackendPref } from '../model/backend';
import { loadHfCheckpoint } from '../model/checkpoint';

export function parseIds(list: string): number[] {
  const ids = list.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  if (ids.length === 0 || ids.some((n) => !Number.isInteger(n) || n < 0)) throw new Error(`--input-ids: expected comma-separated token ids, got '${list}'`);
  return ids;
}

/** The logits of the last position, as a JSON array on stdout (the backend choice goes to stderr). */
export async function modelLogitsCommand(opts: { checkpoint: string; inputIds: string; backend: BackendPref }): Promise<number[]> {
  const ids = parseIds(opts.inputIds);
  await selectBackend(opts.backend, (line) => console.error(line));
  const model = loadHfCheckpoint(opts.checkpoint);
  const bad = ids.find((i) => i >= model.dims.vocab);
  if (bad !== undefined) throw new Error(`--input-ids: ${bad} is outside the vocabulary (${model.dims.vocab})`);
  const logits = model.forward([ids], { lastOnly: true });
  const row = Array.from(logits.dataSync());
  logits.dispose();
  model.dispose();
  console.log(JSON.stringify(row));
  return row;
}
