/**
 * `fn` over `items` with at most `concurrency` calls in flight; results in the items' order. The first failure stops
 * new calls, the ones in flight finish, and the failure is thrown. `onDone(done, total)` after each success.
 */
export async function mapConcurrent<T, R>(items: readonly T[], concurrency: number, fn: (item: T, index: number) => Promise<R>, onDone?: (done: number, total: number) => void): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  let done = 0;
  let failed = false;
  let failure: unknown;
  const worker = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i]!, i);
      } catch (e) {
        if (!failed) [failed, failure] = [true, e];
        return;
      }
      onDone?.(++done, items.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  if (failed) throw failure;
  return out;
}
