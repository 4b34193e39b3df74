/**
 * A local fake of an OpenAI-compatible chat-completions server, for tests and fault injection.
 * node:http only, no dependencies.
 *
 *   const fake = await startFakeOpenAI({ behaviour: (req, ctx) => ctx.nthForKey === 1 ? replies.status(503) : replies.json({ a: 1 }) });
 *   const cfg = LlmConfig.parse({ roles: { filter: { baseUrl: fake.url, model: 'fake' } } });
 *   ...
 *   await fake.close();
 *
 * Every POST /v1/chat/completions is recorded (parsed body, headers) and answered by the behaviour, a
 * function of the request and of counters (overall, and per request key — by default the messages).
 * Answers carry a `usage` block like OpenAI's (prompt/completion/total tokens, cached prompt tokens).
 * `inFlight`/`maxInFlight` let tests check concurrency bounds from the server's side.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  /** 0-based arrival order. */
  index: number;
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Parsed JSON body (undefined if the body was not JSON). */
  body: ChatBody;
  /** Request key used by the per-key counter. */
  key: string;
  receivedAt: number;
}

/** The parts of a chat-completions request body the fake looks at; everything else is kept as sent. */
export interface ChatBody {
  model?: string;
  messages?: Array<{ role: string; content: unknown }>;
  response_format?: { type: string; json_schema?: { name: string; schema: unknown; strict?: boolean } };
  [k: string]: unknown;
}

export interface RequestContext {
  /** 1-based count of requests received so far, this one included. */
  total: number;
  /** 1-based count of requests with this request's key, this one included. */
  nthForKey: number;
  key: string;
}

export interface UsageOverride {
  prompt_tokens?: number;
  completion_tokens?: number;
  cached_tokens?: number;
}

export type FakeReply =
  /** 200 with this assistant content. */
  | { kind: 'content'; content: string | null; usage?: UsageOverride; delayMs?: number; finishReason?: string }
  /** An HTTP error in OpenAI's error format. */
  | { kind: 'status'; status: number; message?: string; code?: string; param?: string; headers?: Record<string, string>; delayMs?: number }
  /** Never answer (the connection stays open until the client gives up or the server closes). */
  | { kind: 'hang' };

export type Behaviour = (req: RecordedRequest, ctx: RequestContext) => FakeReply | Promise<FakeReply>;

/** Reply constructors. */
export const replies = {
  /** Content that is the JSON encoding of `value`. */
  json: (value: unknown, opts: { usage?: UsageOverride; delayMs?: number } = {}): FakeReply => ({ kind: 'content', content: JSON.stringify(value), ...opts }),
  text: (content: string, opts: { usage?: UsageOverride; delayMs?: number; finishReason?: string } = {}): FakeReply => ({ kind: 'content', content, ...opts }),
  status: (status: number, opts: { message?: string; code?: string; param?: string; headers?: Record<string, string>; delayMs?: number } = {}): FakeReply => ({
    kind: 'status',
    status,
    ...opts,
  }),
  rateLimited: (retryAfter?: string): FakeReply => ({
    kind: 'status',
    status: 429,
    message: 'Rate limit reached, please retry later',
    code: 'rate_limit_exceeded',
    ...(retryAfter !== undefined ? { headers: { 'retry-after': retryAfter } } : {}),
  }),
  hang: (): FakeReply => ({ kind: 'hang' }),
  /** What a server without schema-guided decoding answers to `response_format`. */
  rejectResponseFormat: (type = 'json_schema'): FakeReply => ({
    kind: 'status',
    status: 400,
    message: `Invalid parameter: 'response_format' of type '${type}' is not supported with this model.`,
    param: 'response_format',
    code: 'invalid_request_error',
  }),
};

export interface FakeOpenAI {
  /** Base URL ending in /v1, for `baseUrl` / `new OpenAI({ baseURL })`. */
  url: string;
  requests: RecordedRequest[];
  /** Requests received per key. */
  counts: Map<string, number>;
  /** Successful (200) answers delivered per key, to a client still connected. */
  answered: Map<string, number>;
  readonly inFlight: number;
  readonly maxInFlight: number;
  setBehaviour(fn: Behaviour): void;
  close(): Promise<void>;
}

export interface FakeOpenAIOptions {
  behaviour?: Behaviour;
  /** Request key for `counts`/`nthForKey`; default: the JSON of the messages. */
  keyOf?: (body: ChatBody) => string;
  /** Keep every request in `requests` (default true); load tests with tens of thousands of requests turn it off. */
  record?: boolean;
}

/** Rough token count, ~4 characters per token, at least 1 for non-empty text. */
const approxTokens = (s: string): number => (s.length === 0 ? 0 : Math.max(1, Math.ceil(s.length / 4)));

const defaultBehaviour: Behaviour = () => replies.text('{}');

export async function startFakeOpenAI(opts: FakeOpenAIOptions = {}): Promise<FakeOpenAI> {
  let behaviour = opts.behaviour ?? defaultBehaviour;
  const keyOf = opts.keyOf ?? ((body: ChatBody) => JSON.stringify(body.messages ?? null));
  const requests: RecordedRequest[] = [];
  const counts = new Map<string, number>();
  const answered = new Map<string, number>();
  const timers = new Set<NodeJS.Timeout>();
  let inFlight = 0;
  let maxInFlight = 0;
  let total = 0;

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void handle(req, res, Buffer.concat(chunks).toString('utf8'));
    });
  });

  const send = (res: http.ServerResponse, status: number, payload: unknown, headers: Record<string, string> = {}): void => {
    if (res.destroyed || res.writableEnded) return;
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(payload));
  };

  const later = (ms: number, fn: () => void): void => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
  };

  async function handle(req: http.IncomingMessage, res: http.ServerResponse, raw: string): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (req.method === 'GET' && path === '/v1/models') {
      send(res, 200, { object: 'list', data: [{ id: 'fake-model', object: 'model', created: 0, owned_by: 'fake' }] });
      return;
    }
    if (req.method !== 'POST' || path !== '/v1/chat/completions') {
      send(res, 404, { error: { message: `no route for ${req.method} ${path}`, type: 'invalid_request_error', param: null, code: null } });
      return;
    }

    let body: ChatBody;
    try {
      body = JSON.parse(raw) as ChatBody;
    } catch {
      send(res, 400, { error: { message: 'request body is not JSON', type: 'invalid_request_error', param: null, code: null } });
      return;
    }
    const key = keyOf(body);
    const nthForKey = (counts.get(key) ?? 0) + 1;
    counts.set(key, nthForKey);
    const recorded: RecordedRequest = { index: total++, method: req.method ?? 'POST', path, headers: req.headers, body, key, receivedAt: Date.now() };
    if (opts.record !== false) requests.push(recorded);

    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    let done = false;
    const finish = (): void => {
      if (!done) {
        done = true;
        inFlight--;
      }
    };
    res.on('close', finish);

    let reply: FakeReply;
    try {
      reply = await behaviour(recorded, { total, nthForKey, key });
    } catch (e) {
      reply = replies.status(500, { message: `fake behaviour threw: ${(e as Error).message}` });
    }

    if (reply.kind === 'hang') return; // answered never; `finish` runs when the client disconnects

    const respond = (): void => {
      if (reply.kind === 'status') {
        send(
          res,
          reply.status,
          { error: { message: reply.message ?? `HTTP ${reply.status}`, type: reply.status >= 500 ? 'server_error' : 'invalid_request_error', param: reply.param ?? null, code: reply.code ?? null } },
          reply.headers,
        );
        return;
      }
      if (reply.kind !== 'content') return;
      const promptText = (body.messages ?? []).map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content))).join('\n');
      const prompt = reply.usage?.prompt_tokens ?? approxTokens(promptText);
      const completion = reply.usage?.completion_tokens ?? approxTokens(reply.content ?? '');
      // Delivered answers only: a request whose client went away (a killed worker) was never paid for.
      if (!res.destroyed && !res.writableEnded) answered.set(key, (answered.get(key) ?? 0) + 1);
      send(res, 200, {
        id: `chatcmpl-fake-${recorded.index}`,
        object: 'chat.completion',
        created: Math.floor(Date.now() / 1000),
        model: body.model ?? 'fake-model',
        choices: [{ index: 0, message: { role: 'assistant', content: reply.content, refusal: null }, finish_reason: reply.finishReason ?? 'stop', logprobs: null }],
        usage: {
          prompt_tokens: prompt,
          completion_tokens: completion,
          total_tokens: prompt + completion,
          prompt_tokens_details: { cached_tokens: reply.usage?.cached_tokens ?? 0 },
          completion_tokens_details: { reasoning_tokens: 0 },
        },
      });
    };
    const delay = reply.delayMs ?? 0;
    if (delay > 0) later(delay, respond);
    else respond();
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    counts,
    answered,
    get inFlight() {
      return inFlight;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    setBehaviour(fn: Behaviour) {
      behaviour = fn;
    },
    close: async () => {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
