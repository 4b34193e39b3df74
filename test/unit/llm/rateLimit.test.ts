/**
 * The adaptive rate limiter of the LLM client (src/llm/rateLimit.ts), on a fake clock: no pacing before a 429; after
 * a second of 429s the pace is what the endpoint accepted (starts minus refusals, each refusal filed under its own
 * start); 429s within the cooldown count once; successes grow the rate, never past twice the accepted rate; a long
 * spell without 429 ends the pacing. And a simulation against a token bucket: the limiter settles near its rate.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdaptiveRateLimiter } from '../../../src/llm/rateLimit';

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, at: (ms: number) => (t = start + ms) };
}

/**
 * 2 s at 20 requests/s, all accepted; then 1 s at 20/s of which every other one is refused (the first 429 at 2 s
 * starts the measurement); the 429 at 3 s sets the pace at what was accepted: 10/s.
 */
function saturate(l: AdaptiveRateLimiter, c: ReturnType<typeof clock>): void {
  for (let i = 0; i < 40; i++) {
    c.at(50 * i);
    assert.equal(l.reserve(), 0);
    l.onSuccess();
  }
  for (let i = 0; i < 20; i++) {
    c.at(2000 + 50 * i);
    assert.equal(l.reserve(), 0);
    if (i % 2 === 0) l.onRateLimited(c.now());
    else l.onSuccess();
    assert.equal(l.rate, Infinity, 'no pacing while measuring');
  }
  c.at(3000);
  l.reserve();
  l.onRateLimited(c.now());
}

test('no pacing before a 429; then the pace is what the endpoint accepted over a second of 429s', () => {
  const c = clock();
  const l = new AdaptiveRateLimiter({}, c.now);
  saturate(l, c);
  assert.ok(Math.abs(l.rate - 10) < 0.01, `rate ${l.rate}`);
  // Start times are spaced 1/rate apart.
  const waits = [l.reserve(), l.reserve(), l.reserve()];
  assert.deepEqual(waits.map((w) => Math.round(w)), [0, 100, 200]);
});

test('a refusal cancels its own start: a fan-out refused at once does not count as accepted', () => {
  const c = clock();
  const l = new AdaptiveRateLimiter({}, c.now);
  // 100 requests start together; 5 are accepted, 95 refused a few ms later, again and again for a second.
  for (let round = 0; round < 50; round++) {
    const sent = c.at(20 * round);
    for (let i = 0; i < (round === 0 ? 100 : 95); i++) l.reserve();
    c.at(20 * round + 3);
    for (let i = 0; i < 95; i++) l.onRateLimited(sent);
  }
  c.at(1100);
  l.reserve();
  l.onRateLimited(c.now());
  // 5 accepted (the first round's) over ~1.1 s.
  assert.ok(l.rate > 3 && l.rate < 6, `rate ${l.rate}`);
});

test('429s within the cooldown are one congestion signal; successes grow the rate up to twice the accepted rate', () => {
  const c = clock();
  const l = new AdaptiveRateLimiter({ decrease: 0.5, growth: 1, cooldownMs: 1000 }, c.now);
  saturate(l, c);
  const paced = l.rate;
  c.at(3500);
  l.onRateLimited(c.now());
  assert.equal(l.rate, paced, 'one decrease per cooldown');
  c.at(4100);
  l.onRateLimited(c.now());
  assert.ok(Math.abs(l.rate - paced / 2) < 1e-9);
  // Requests at 2/s, all answered (4 or 5 of them in the 2 s window): the rate grows to about 4/s, never past 5/s.
  for (let i = 1; i <= 50; i++) {
    c.at(4100 + 500 * i);
    l.reserve();
    l.onSuccess();
  }
  assert.ok(l.rate <= 5 + 1e-9 && l.rate >= 4, `rate ${l.rate}`);
});

test('pacing ends after releaseAfterMs without a 429', () => {
  const c = clock();
  const l = new AdaptiveRateLimiter({ releaseAfterMs: 10_000 }, c.now);
  saturate(l, c);
  assert.ok(Number.isFinite(l.rate));
  c.at(3000 + 10_001);
  assert.equal(l.reserve(), 0);
  assert.equal(l.rate, Infinity);
});

test('against a token bucket of 50/s, many eager requesters settle near the limit with few 429s', () => {
  let now = 0;
  const l = new AdaptiveRateLimiter({}, () => now);
  const rate = 50;
  const burst = 5;
  let tokens = burst;
  let last = 0;
  let paid = 0;
  let paidLate = 0;
  let refused = 0;
  // 32 requesters, each asking again as soon as it may (after an answer, or after a 429's Retry-After). A discrete
  // event simulation: `ready` = asks the limiter for a start time, `send` = reaches the endpoint.
  const events: { t: number; kind: 'ready' | 'send' }[] = Array.from({ length: 32 }, () => ({ t: 0, kind: 'ready' as const }));
  const end = 60_000;
  for (;;) {
    let k = 0;
    for (let j = 1; j < events.length; j++) if (events[j]!.t < events[k]!.t) k = j;
    const e = events[k]!;
    if (e.t >= end) break;
    now = e.t;
    if (e.kind === 'ready') {
      events[k] = { t: e.t + l.reserve(), kind: 'send' };
      continue;
    }
    tokens = Math.min(burst, tokens + ((e.t - last) / 1000) * rate);
    last = e.t;
    if (tokens >= 1) {
      tokens -= 1;
      paid++;
      if (e.t >= 10_000) paidLate++;
      l.onSuccess();
      events[k] = { t: e.t + 20, kind: 'ready' }; // answer latency
    } else {
      if (e.t >= 2_000) refused++;
      l.onRateLimited(e.t);
      events[k] = { t: e.t + Math.ceil(((1 - tokens) / rate) * 1000) + Math.random() * 10, kind: 'ready' };
    }
  }
  const steady = paidLate / 50; // paid per second from 10 s to 60 s
  assert.ok(steady >= 0.85 * rate && steady <= rate * 1.01, `steady ${steady.toFixed(1)}/s`);
  // The first second (unpaced, measuring) refuses a herd; after that 429s are rare.
  assert.ok(refused < paid / 20, `${refused} refused after 2 s for ${paid} paid`);
});
