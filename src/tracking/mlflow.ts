/**
 * MLflow through its REST API (`/api/2.0/mlflow/...`, the protocol of MLflow's own clients; there is no maintained
 * JS client): the experiment by name (created when missing), the run by the tag `cm2.run_id` (created when missing,
 * so a lost cursor finds it again instead of making a second one), `runs/log-batch` for metrics, parameters and tags,
 * `runs/update` when the cm2 run ends. Credentials come from the environment as for MLflow's Python client:
 * `MLFLOW_TRACKING_TOKEN` (bearer), or `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD` (basic).
 *
 * Exactly once: MLflow keeps a metric value per (key, step, timestamp, value) and drops an exact duplicate
 * (its SQL store's primary key), so a batch sent again with the same timestamps, after a crash between sending and
 * recording the cursor, adds nothing (./sync.ts writes each batch, timestamps included, before sending it).
 */

export interface MlflowMetric {
  key: string;
  value: number;
  timestamp: number;
  step: number;
}

export class MlflowError extends Error {
  override readonly name = 'MlflowError';
  constructor(readonly status: number, readonly code: string | undefined, message: string) {
    super(message);
  }
}

/** MLflow's limits per `log-batch` request. */
const MAX_METRICS = 1000;
const MAX_PARAMS = 100;
const MAX_TAGS = 100;

export class MlflowClient {
  private readonly base: string;

  constructor(uri: string, private readonly env: NodeJS.ProcessEnv = process.env, private readonly timeoutMs = 30_000) {
    this.base = `${uri.replace(/\/+$/, '')}/api/2.0/mlflow`;
  }

  private headers(): Record<string, string> {
    const h: Record<string, string> = { 'content-type': 'application/json' };
    const token = this.env['MLFLOW_TRACKING_TOKEN'];
    const user = this.env['MLFLOW_TRACKING_USERNAME'];
    if (token) h['authorization'] = `Bearer ${token}`;
    else if (user) h['authorization'] = `Basic ${Buffer.from(`${user}:${this.env['MLFLOW_TRACKING_PASSWORD'] ?? ''}`).toString('base64')}`;
    return h;
  }

  async call<T = Record<string, unknown>>(method: 'GET' | 'POST', path: string, body?: Record<string, unknown>): Promise<T> {
    const url = method === 'GET' && body ? `${this.base}/${path}?${new URLSearchParams(Object.entries(body).map(([k, v]): [string, string] => [k, String(v)]))}` : `${this.base}/${path}`;
    const res = await fetch(url, {
      method,
      headers: this.headers(),
      ...(method === 'POST' ? { body: JSON.stringify(body ?? {}) } : {}),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await res.text();
    let json: Record<string, unknown> = {};
    try {
      json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      // an HTML error page (a proxy); the status says what happened
    }
    if (!res.ok) {
      const code = typeof json['error_code'] === 'string' ? json['error_code'] : undefined;
      const message = typeof json['message'] === 'string' ? json['message'] : text.slice(0, 300);
      throw new MlflowError(res.status, code, `MLflow ${path}: HTTP ${res.status}${code ? ` ${code}` : ''}: ${message}`);
    }
    return json as T;
  }

  /** The experiment's id, created when there is none of that name. */
  async experimentId(name: string): Promise<string> {
    const get = async () => {
      try {
        const r = await this.call<{ experiment: { experiment_id: string } }>('GET', 'experiments/get-by-name', { experiment_name: name });
        return r.experiment.experiment_id;
      } catch (e) {
        if (e instanceof MlflowError && e.code === 'RESOURCE_DOES_NOT_EXIST') return undefined;
        throw e;
      }
    };
    const found = await get();
    if (found) return found;
    try {
      return (await this.call<{ experiment_id: string }>('POST', 'experiments/create', { name })).experiment_id;
    } catch (e) {
      // created meanwhile by someone else
      if (e instanceof MlflowError && e.code === 'RESOURCE_ALREADY_EXISTS') {
        const again = await get();
        if (again) return again;
      }
      throw e;
    }
  }

  /** The run tagged `cm2.run_id = runId` in the experiment, created (with that tag) when there is none. */
  async runFor(experimentId: string, runId: string, runName: string): Promise<string> {
    const found = await this.call<{ runs?: { info: { run_id: string } }[] }>('POST', 'runs/search', {
      experiment_ids: [experimentId],
      filter: `tags.\`cm2.run_id\` = '${runId.replace(/'/g, "\\'")}'`,
      max_results: 1,
    });
    const existing = found.runs?.[0]?.info.run_id;
    if (existing) return existing;
    const created = await this.call<{ run: { info: { run_id: string } } }>('POST', 'runs/create', {
      experiment_id: experimentId,
      run_name: runName,
      start_time: Date.now(),
      tags: [{ key: 'cm2.run_id', value: runId }, { key: 'mlflow.runName', value: runName }],
    });
    return created.run.info.run_id;
  }

  /** Metrics, parameters and tags in as many requests as MLflow's limits need. */
  async logBatch(runId: string, batch: { metrics?: MlflowMetric[]; params?: Record<string, string>; tags?: Record<string, string> }): Promise<void> {
    const metrics = batch.metrics ?? [];
    const params = Object.entries(batch.params ?? {}).map(([key, value]) => ({ key, value }));
    const tags = Object.entries(batch.tags ?? {}).map(([key, value]) => ({ key, value }));
    for (let i = 0; i < metrics.length; i += MAX_METRICS) await this.call('POST', 'runs/log-batch', { run_id: runId, metrics: metrics.slice(i, i + MAX_METRICS) });
    for (let i = 0; i < params.length; i += MAX_PARAMS) await this.call('POST', 'runs/log-batch', { run_id: runId, params: params.slice(i, i + MAX_PARAMS) });
    for (let i = 0; i < tags.length; i += MAX_TAGS) await this.call('POST', 'runs/log-batch', { run_id: runId, tags: tags.slice(i, i + MAX_TAGS) });
  }

  /** The run's status (`RUNNING` again for a run resumed after it ended); an end time with an end. */
  async setStatus(runId: string, status: 'RUNNING' | 'FINISHED' | 'FAILED' | 'KILLED', endTime?: number): Promise<void> {
    await this.call('POST', 'runs/update', { run_id: runId, status, ...(endTime !== undefined ? { end_time: endTime } : {}) });
  }

  /** A metric's history (tests and `cm2 track status`). */
  async history(runId: string, key: string): Promise<{ key: string; value: number; timestamp: number; step: number }[]> {
    const out: { key: string; value: number; timestamp: number; step: number }[] = [];
    let token: string | undefined;
    do {
      const r = await this.call<{ metrics?: { key: string; value: number; timestamp: number; step: number }[]; next_page_token?: string }>('GET', 'metrics/get-history', {
        run_id: runId, metric_key: key, max_results: 25000, ...(token ? { page_token: token } : {}),
      });
      out.push(...(r.metrics ?? []).map((m) => ({ ...m, step: Number(m.step), timestamp: Number(m.timestamp) })));
      token = r.next_page_token || undefined;
    } while (token);
    return out;
  }
}
