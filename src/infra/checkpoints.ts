/**
 * Training checkpoints in S3, torn-write safe.
 *
 * A checkpoint is a folder `<prefix>/step-<NNNNNNNN>/` of files (weights, optimizer state, …) plus a `manifest.json`
 * written LAST, listing every file with its sha256 and size and carrying the small training state (step, data
 * cursor, RNG state, metrics so far). A folder without a manifest, or whose files do not match it, is a torn
 * checkpoint (a worker died while writing) and is never loaded: `latestCheckpoint` falls back to the previous one.
 * Writing the same step again (a retried activity) overwrites the same keys with the same content.
 */
import { z } from 'zod';
import { ObjectRef, type ObjectStore } from './store';

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

/** Writes the files, then the manifest. Returns the manifest's ref (the checkpoint's claim check). */
export async function writeCheckpoint(
  store: ObjectStore,
  prefix: string,
  step: number,
  files: Record<string, Uint8Array>,
  state: Record<string, unknown>,
): Promise<{ manifestKey: string; manifest: CheckpointManifest }> {
  const folder = stepFolder(prefix, step);
  const refs: Record<string, ObjectRef> = {};
  for (const [name, bytes] of Object.entries(files)) refs[name] = await store.putBytes(`${folder}/${name}`, bytes);
  const manifest: CheckpointManifest = { format: 'cm2-checkpoint/1', step, files: refs, state, createdAt: new Date().toISOString() };
  const manifestKey = `${folder}/manifest.json`;
  await store.putJson(manifestKey, manifest);
  return { manifestKey, manifest };
}

/** Reads a checkpoint's files, verifying each against the manifest. */
export async function readCheckpoint(store: ObjectStore, manifestKey: string): Promise<{ manifest: CheckpointManifest; files: Record<string, Buffer> }> {
  const manifest = await store.getJson(manifestKey, CheckpointManifest);
  const files: Record<string, Buffer> = {};
  for (const [name, ref] of Object.entries(manifest.files)) files[name] = await store.getVerified(ref);
  return { manifest, files };
}

/**
 * The newest complete checkpoint under `prefix`, or undefined. Folders without a manifest are skipped; a manifest
 * whose files are missing or altered is skipped too (with a note through `log`).
 */
export async function latestCheckpoint(store: ObjectStore, prefix: string, log: (m: string) => void = () => undefined): Promise<{ manifestKey: string; manifest: CheckpointManifest } | undefined> {
  const keys = (await store.list(`${prefix}/`)).filter((k) => /\/step-\d{8}\/manifest\.json$/.test(k)).sort().reverse();
  for (const manifestKey of keys) {
    try {
      const manifest = await store.getJson(manifestKey, CheckpointManifest);
      let complete = true;
      for (const ref of Object.values(manifest.files)) {
        const actual = await store.ref(ref.key);
        if (!actual || actual.sha256 !== ref.sha256) {
          complete = false;
          log(`checkpoint ${manifestKey}: ${ref.key} is missing or differs from the manifest; skipped`);
          break;
        }
      }
      if (complete) return { manifestKey, manifest };
    } catch (e) {
      log(`checkpoint ${manifestKey}: unreadable manifest (${(e as Error).message}); skipped`);
    }
  }
  return undefined;
}
