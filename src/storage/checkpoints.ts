/**
 * Training checkpoints in S3, torn-write safe.
 *
 * A checkpoint is a folder `<prefix>/step-<NNNNNNNN>/` of files (weights, optimizer state, …) plus a `manifest.json`
 * written LAST, listing every file with its sha256 and size and carrying the small training state (step, data
 * cursor, RNG state, metrics so far). A folder without a manifest, or whose files do not match it, is a torn
 * checkpoint (a worker died while writing) and is never loaded: `latestCheckpoint` falls back to the previous one.
 * Only an answer of the store makes it fall back: an error in asking (network, 5xx, timeout) is retried and then
 * thrown, never taken for "no checkpoint" (`completeCheckpoint` tells the three cases apart).
 * Writing the same step again (a retried activity) overwrites the same keys with the same content.
 *
 * Removal (retention, `rl.keepCheckpoints`) is the write in reverse: the manifest goes FIRST, then the files, so a
 * folder that a killed pruner left half-removed has no manifest and is never taken for a complete checkpoint; a
 * retried removal finishes it.
 *
 * Files of any size: a checkpoint's files are given as bytes (small ones) or as local files (written by the streaming
 * safetensors writer into a temp folder), uploaded as streams; `downloadCheckpoint` streams them back into a local
 * folder, each verified against the manifest's sha256 and size on the way.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { ifExists, NotFoundError, ObjectRef, retryTransient, type ObjectStore, type RetryOptions } from './store';

export const CheckpointManifest = z.object({
  format: z.literal('cm2-checkpoint/1'),
  step: z.number().int().nonnegative(),
  files: z.record(z.string(), ObjectRef),
  /** Small JSON state of the trainer (cursor, RNG, schedule position, metrics). */
  state: z.record(z.string(), z.unknown()),
  createdAt: z.string(),
});
export type CheckpointManifest = z.infer<typeof CheckpointManifest>;

export const stepFolder = (prefix: string, step: number) => `${prefix}/step-${String(step).padStart(8, '0')}`;

/** A checkpoint file: bytes, or a local file (with its sha256 when the writer computed it). */
export type CheckpointFile = Uint8Array | { path: string; sha256?: string };

/** Writes the files, then the manifest. Returns the manifest's ref (the checkpoint's claim check). */
export async function writeCheckpoint(
  store: ObjectStore,
  prefix: string,
  step: number,
  files: Record<string, CheckpointFile>,
  state: Record<string, unknown>,
): Promise<{ manifestKey: string; manifest: CheckpointManifest }> {
  const folder = stepFolder(prefix, step);
  const refs: Record<string, ObjectRef> = {};
  for (const [name, file] of Object.entries(files)) {
    refs[name] = file instanceof Uint8Array
      ? await store.putBytes(`${folder}/${name}`, file)
      : await store.putFile(`${folder}/${name}`, file.path, file.sha256 ? { sha256: file.sha256 } : {});
  }
  const manifest: CheckpointManifest = { format: 'cm2-checkpoint/1', step, files: refs, state, createdAt: new Date().toISOString() };
  const manifestKey = `${folder}/manifest.json`;
  await store.putJson(manifestKey, manifest);
  return { manifestKey, manifest };
}

/**
 * Downloads a checkpoint's files (all, or those named in `only`) into `dir` as `dir/<name>`, streamed and verified
 * against the manifest. Returns the manifest and the local paths. A file named in `only` but not in the manifest is
 * simply absent from `paths`.
 */
export async function downloadCheckpoint(store: ObjectStore, manifestKey: string, dir: string, only?: readonly string[]): Promise<{ manifest: CheckpointManifest; paths: Record<string, string> }> {
  const manifest = await store.getJson(manifestKey, CheckpointManifest);
  const paths: Record<string, string> = {};
  for (const [name, ref] of Object.entries(manifest.files)) {
    if (only && !only.includes(name)) continue;
    if (name.includes('/') || name.startsWith('.')) throw new Error(`${manifestKey}: file name ${name} is not a plain file name`);
    const path = join(dir, name);
    await store.getVerifiedFile(ref, path);
    paths[name] = path;
  }
  return { manifest, paths };
}

/**
 * Downloads an HF model folder in S3 (`prefix/config.json` and `prefix/model.safetensors`, or the index and the shards
 * it lists) into `dir`, streamed. Tokenizer files are not fetched. A missing object throws NotFoundError.
 */
export async function downloadHfFolder(store: ObjectStore, prefix: string, dir: string): Promise<void> {
  await store.getFile(`${prefix}/config.json`, join(dir, 'config.json'));
  const single = await ifExists(() => store.getFile(`${prefix}/model.safetensors`, join(dir, 'model.safetensors')));
  if (single) return;
  const indexPath = join(dir, 'model.safetensors.index.json');
  await store.getFile(`${prefix}/model.safetensors.index.json`, indexPath);
  const index = JSON.parse(await readFile(indexPath, 'utf8')) as { weight_map?: Record<string, string> };
  const files = [...new Set(Object.values(index.weight_map ?? {}))];
  for (const f of files) {
    if (f.includes('/') || f.startsWith('.')) throw new Error(`s3 ${prefix}/model.safetensors.index.json: shard ${f} is not a plain file name`);
    await store.getFile(`${prefix}/${f}`, join(dir, f));
  }
}

/** Runs `fn` with a fresh temp folder (under TMPDIR), removed afterwards whatever happens. */
export async function withTempDir<T>(fn: (dir: string) => Promise<T>, label = 'ckpt'): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), `cm2-${label}-`));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Reads a checkpoint's files into memory, verifying each against the manifest (small checkpoints; see downloadCheckpoint). */
export async function readCheckpoint(store: ObjectStore, manifestKey: string): Promise<{ manifest: CheckpointManifest; files: Record<string, Buffer> }> {
  const manifest = await store.getJson(manifestKey, CheckpointManifest);
  const files: Record<string, Buffer> = {};
  for (const [name, ref] of Object.entries(manifest.files)) files[name] = await store.getVerified(ref);
  return { manifest, files };
}

/**
 * The store could not be asked about a checkpoint (network error, 5xx, timeout) even after retries. Never a reason to
 * fall back to an older checkpoint: thrown, so the activity fails and Temporal retries it.
 */
export class CheckpointUnavailableError extends Error {
  constructor(readonly key: string, cause: unknown) {
    super(`checkpoint ${key}: the store could not be asked (${cause instanceof Error ? cause.message : String(cause)}); not falling back to an older checkpoint`, { cause });
    this.name = 'CheckpointUnavailableError';
  }
}

/** Retries of the lookups (tests shorten them). */
export interface LookupOptions {
  retry?: RetryOptions;
}

/**
 * The checkpoint of `manifestKey` when it is complete, else undefined. Three outcomes apart:
 * - absent: no manifest (a crash before the manifest, or a removal in progress) or a file the manifest lists is
 *   missing or differs: not a checkpoint, undefined (with a note through `log` for a missing or altered file);
 * - unreadable: the manifest exists but is not JSON or not a `cm2-checkpoint/1` manifest. No torn write makes one (the
 *   manifest is one whole-object write): it was written by something else. Skipped with a WARNING through `log` naming
 *   the key, so a resume starts from the previous checkpoint (a retrained step writes the same keys again);
 * - could not ask: any other error of the store (network, 5xx, timeout), after `retryTransient`'s tries, throws a
 *   CheckpointUnavailableError: an older checkpoint is never taken for want of an answer.
 */
export async function completeCheckpoint(store: ObjectStore, manifestKey: string, log: (m: string) => void = () => undefined, opts: LookupOptions = {}): Promise<{ manifestKey: string; manifest: CheckpointManifest } | undefined> {
  const ask = async <T>(op: () => Promise<T>): Promise<T> => {
    try {
      return await retryTransient(op, opts.retry);
    } catch (e) {
      throw e instanceof NotFoundError ? e : new CheckpointUnavailableError(manifestKey, e);
    }
  };
  const bytes = await ifExists(() => ask(() => store.getBytes(manifestKey)));
  if (!bytes) {
    log(`checkpoint ${manifestKey}: no manifest (removed meanwhile); skipped`);
    return undefined;
  }
  const manifest = parseManifest(bytes);
  if (typeof manifest === 'string') {
    log(`WARNING: checkpoint ${manifestKey}: unreadable manifest (${manifest}); skipped, an older checkpoint is used`);
    return undefined;
  }
  for (const ref of Object.values(manifest.files)) {
    const actual = await ask(() => store.ref(ref.key));
    if (!actual || actual.sha256 !== ref.sha256) {
      log(`checkpoint ${manifestKey}: ${ref.key} is missing or differs from the manifest; skipped`);
      return undefined;
    }
  }
  return { manifestKey, manifest };
}

/** A manifest's bytes as a manifest, or why they are not one. */
function parseManifest(bytes: Buffer): CheckpointManifest | string {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (e) {
    return `not JSON: ${(e as Error).message}`;
  }
  const parsed = CheckpointManifest.safeParse(value);
  return parsed.success ? parsed.data : parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
}

/**
 * The newest complete checkpoint under `prefix`, or undefined. Folders without a manifest are skipped; a manifest
 * whose files are missing or altered is skipped too (with a note through `log`), and so is an unreadable one (with a
 * WARNING). A store that cannot be asked (listing or reading) throws: see `completeCheckpoint`.
 */
export async function latestCheckpoint(store: ObjectStore, prefix: string, log: (m: string) => void = () => undefined, opts: LookupOptions = {}): Promise<{ manifestKey: string; manifest: CheckpointManifest } | undefined> {
  const listed = await retryTransient(() => store.list(`${prefix}/`), opts.retry).catch((e: unknown) => {
    throw new CheckpointUnavailableError(`${prefix}/`, e);
  });
  const keys = listed.filter((k) => /\/step-\d{8}\/manifest\.json$/.test(k)).sort().reverse();
  for (const manifestKey of keys) {
    const found = await completeCheckpoint(store, manifestKey, log, opts);
    if (found) return found;
  }
  return undefined;
}

/** The checkpoint folders under `prefix` by step, each with its keys (with or without a manifest). */
export async function listCheckpointFolders(store: ObjectStore, prefix: string): Promise<Map<number, string[]>> {
  const folders = new Map<number, string[]>();
  for (const key of await store.list(`${prefix}/`)) {
    const m = /\/step-(\d{8})\/[^/]+$/.exec(key.slice(prefix.length));
    if (!m) continue;
    const step = Number(m[1]);
    folders.set(step, [...(folders.get(step) ?? []), key]);
  }
  return folders;
}

/**
 * Removes one checkpoint folder: its manifest first (from then on the checkpoint no longer exists for any reader),
 * then its other objects. `keys` are the folder's objects as listed; `onRemoved` runs after each removal (heartbeats).
 * Idempotent: removing a missing object is not an error, so a retry after a kill finishes the job.
 */
export async function removeCheckpoint(store: ObjectStore, prefix: string, step: number, keys: readonly string[], onRemoved: (key: string) => Promise<void> | void = () => undefined): Promise<number> {
  const manifestKey = `${stepFolder(prefix, step)}/manifest.json`;
  const rest = keys.filter((k) => k !== manifestKey && k.startsWith(`${stepFolder(prefix, step)}/`)).sort();
  for (const key of [manifestKey, ...rest]) {
    await store.remove(key);
    await onRemoved(key);
  }
  return rest.length + 1;
}
