/** Shopping dialogues: search, search-then-order (sequential), details and orders of earlier results, order status. */
import { existingOrders, PRODUCT_KINDS, searchProducts, type OrderFacts } from '../catalog';
import type { ToolOutcome } from '../worldTypes';
import { listText, resultOf, scenarioKit, type DraftTurn, type ExecutedCall, type Memory, type Scenario, type TurnContext } from './scenarioKit';

interface ProductRow {
  product_id: string;
  name: string;
  price: number;
  stock: number;
}
interface OrderResult {
  order_id: string;
  name: string;
  quantity: number;
  total: number;
  delivery_days: number;
}
interface OrderStatus {
  order_id: string;
  status: string;
  name: string;
  quantity: number;
  delivery_days: number;
}

/**
 * Once a product is ordered, later turns do not offer it again: re-ordering would return the same confirmation
 * (the world is immutable), which would look like a duplicate order.
 */
function forgetOrdered(ctx: TurnContext, productId: string): void {
  ctx.memory.products = ctx.memory.products?.filter((p) => p.product_id !== productId);
}

const plural = (kind: string): string => (kind.endsWith('s') ? kind : `${kind}s`);

/** Reply and facts for a place_order outcome (success, or the shop's out-of-stock error). */
function orderReply(outcome: ToolOutcome, quantity: number): { reply: string; facts: string[]; think: string } {
  if (!outcome.ok) {
    const stock = /only (\d+)/.exec(outcome.error.message)?.[1];
    return {
      think: `The order failed: ${outcome.error.message}. I must tell the user.`,
      reply: `Sorry, I could not place the order: ${outcome.error.message}.`,
      facts: [stock ?? 'out of stock'],
    };
  }
  const r = outcome.result as unknown as OrderResult;
  return {
    think: `The order ${r.order_id} is confirmed with a total of ${r.total} EUR.`,
    reply: `Done! I ordered ${quantity} x ${r.name} for a total of ${r.total} EUR. Your order id is ${r.order_id} and it will arrive in ${r.delivery_days} days.`,
    facts: [r.order_id, String(r.total)],
  };
}

function statusText(s: OrderStatus): string {
  if (s.status === 'delivered') return `order ${s.order_id} (${s.quantity} x ${s.name}) has been delivered`;
  return `order ${s.order_id} (${s.quantity} x ${s.name}) is ${s.status} and should arrive in ${s.delivery_days} days`;
}
const statusFacts = (s: OrderStatus): string[] => [s.status, ...(s.status === 'delivered' ? [] : [String(s.delivery_days)])];

const { opener, followup } = scenarioKit('shopping');
/** Earlier results to order from or ask about. */
const hasProducts = (m: Memory): boolean => (m.products?.length ?? 0) > 0;

export const shoppingScenarios: Scenario[] = [
  opener('shopping.search', (ctx) => {
    const kind = ctx.rng.pick(PRODUCT_KINDS);
    let max: number | undefined;
    if (ctx.rng.chance(0.5)) {
      // A limit that usually keeps at least one product, and sometimes none.
      const prices = searchProducts(ctx.worldSeed, kind).map((p) => p.price);
      max = Math.max(5, Math.ceil(ctx.rng.pick(prices)) + ctx.rng.int(-8, 10));
    }
    const call = ctx.call('search_products', max === undefined ? { query: kind } : { query: kind, max_price: max });
    const results = resultOf<{ results: ProductRow[] }>(call).results;
    ctx.memory.products = results;
    const user =
      max === undefined
        ? ctx.rng.pick([`Which ${plural(kind)} do you have?`, `Show me your ${plural(kind)}, please.`])
        : ctx.rng.pick([`Find me ${kind === 'shoes' ? 'shoes' : `a ${kind}`} under ${max} EUR.`, `I need ${kind === 'shoes' ? 'shoes' : `a ${kind}`} that costs at most ${max} EUR.`]);
    const found = results.map((p) => `the ${p.name} (${p.product_id}) for ${p.price} EUR`);
    return [
      {
        intent: 'shopping.search',
        goal: `Search the shop for ${plural(kind)}${max === undefined ? '' : ` of at most ${max} EUR`} and list the results with their prices.`,
        user,
        steps: [
          {
            think: ctx.think(`The user is looking for ${plural(kind)}${max === undefined ? '' : ` up to ${max} EUR`}.`, `I will call search_products with query ${kind}${max === undefined ? '' : ` and max_price ${max}`}.`),
            calls: [call],
          },
        ],
        replyThink: results.length > 0 ? ctx.reflect(`The search returned ${listText(results.map((p) => p.name))}.`, 'I will list them with their prices.') : ctx.reflect('The search returned nothing.', 'I will tell the user.'),
        reply: results.length > 0 ? `Here is what I found: ${listText(found)}.` : `Sorry, I could not find any ${plural(kind)} under ${max} EUR.`,
        answerFacts: results.flatMap((p) => [p.name, String(p.price)]),
        requiresTool: true,
      },
    ];
  }),
  opener('shopping.buy_cheapest', (ctx) => {
    const kind = ctx.rng.pick(PRODUCT_KINDS);
    const quantity = ctx.rng.int(1, 3);
    const search = ctx.call('search_products', { query: kind });
    const results = resultOf<{ results: ProductRow[] }>(search).results;
    ctx.memory.products = results;
    const cheapest = results[0] as ProductRow;
    const turn: DraftTurn = {
      intent: 'shopping.buy_cheapest',
      goal: `Find the cheapest ${kind} with search_products, then order ${quantity} of it with place_order, and give the order id and total.`,
      user: ctx.rng.pick([`Please order ${quantity} of the cheapest ${kind} you have.`, `I want to buy ${quantity} of your cheapest ${kind}.`]),
      steps: [{ think: ctx.think(`First I need to find the cheapest ${kind}.`, `I will call search_products with query ${kind}.`), calls: [search] }],
      replyThink: '',
      reply: '',
      answerFacts: [],
      requiresTool: true,
    };
    if (cheapest.stock < quantity) {
      // The search already shows there is not enough stock: a careful assistant does not try to order.
      const stockText = cheapest.stock === 0 ? 'it is out of stock' : `only ${cheapest.stock} in stock`;
      turn.goal = `Find the cheapest ${kind} and tell the user that ${quantity} cannot be ordered because there ${cheapest.stock === 0 ? 'are none' : `are only ${cheapest.stock}`} in stock.`;
      turn.replyThink = ctx.reflect(`The cheapest option is the ${cheapest.name}, but ${stockText}.`, 'I cannot order it and will say so.');
      turn.reply = `The cheapest option is the ${cheapest.name} (${cheapest.product_id}) for ${cheapest.price} EUR, but ${cheapest.stock === 0 ? 'it is out of stock' : `there are only ${cheapest.stock} in stock`}, so I could not order ${quantity}.`;
      turn.answerFacts = [cheapest.name, cheapest.stock === 0 ? 'out of stock' : String(cheapest.stock)];
      return [turn];
    }
    const order: ExecutedCall = ctx.call('place_order', { product_id: cheapest.product_id, quantity });
    turn.steps.push({
      think: ctx.think(`The cheapest option is the ${cheapest.name} (${cheapest.product_id}) at ${cheapest.price} EUR with ${cheapest.stock} in stock.`, `I will call place_order with product_id ${cheapest.product_id} and quantity ${quantity}.`),
      calls: [order],
    });
    forgetOrdered(ctx, cheapest.product_id);
    const r = orderReply(order.outcome, quantity);
    turn.replyThink = ctx.reflect(r.think);
    turn.reply = r.reply;
    turn.answerFacts = r.facts;
    return [turn];
  }),
  followup('shopping.order_from_results', hasProducts, (ctx) => {
    const p = ctx.rng.pick(ctx.memory.products ?? []);
    const quantity = ctx.rng.int(1, 3);
    const call = ctx.call('place_order', { product_id: p.product_id, quantity });
    forgetOrdered(ctx, p.product_id);
    const r = orderReply(call.outcome, quantity);
    return [
      {
        intent: 'shopping.order_from_results',
        goal: `Order ${quantity} of the ${p.name} (${p.product_id}) from the earlier results and report the outcome.`,
        user: ctx.rng.pick([`Please order ${quantity} of the ${p.name}.`, `I will take ${quantity} of the ${p.name}.`]),
        steps: [{ think: ctx.think(`The ${p.name} has the id ${p.product_id} in the search results.`, `I will call place_order with product_id ${p.product_id} and quantity ${quantity}.`), calls: [call] }],
        replyThink: ctx.reflect(r.think),
        reply: r.reply,
        answerFacts: r.facts,
        requiresTool: true,
      },
    ];
  }),
  followup('shopping.product_details', hasProducts, (ctx) => {
    const p = ctx.rng.pick(ctx.memory.products ?? []);
    const call = ctx.call('get_product', { product_id: p.product_id });
    const r = resultOf<ProductRow & { rating: number }>(call);
    return [
      {
        intent: 'shopping.product_details',
        goal: `Get the details of the ${p.name} (${p.product_id}) and tell the user its price, rating and stock.`,
        user: ctx.rng.pick([`Tell me more about the ${p.name}.`, `How good is the ${p.name}?`]),
        steps: [{ think: ctx.think(`The ${p.name} is ${p.product_id}.`, `I will call get_product with product_id ${p.product_id}.`), calls: [call] }],
        replyThink: ctx.reflect(`The ${p.name} has a rating of ${r.rating} and ${r.stock} are in stock.`),
        reply: `The ${r.name} costs ${r.price} EUR, has a rating of ${r.rating} and ${r.stock} are in stock.`,
        answerFacts: [String(r.price), String(r.rating), String(r.stock)],
        requiresTool: true,
      },
    ];
  }),
  opener('shopping.order_status', (ctx) => {
    const order = ctx.rng.pick(existingOrders(ctx.worldSeed));
    const call = ctx.call('get_order_status', { order_id: order.order_id });
    const s = resultOf<OrderStatus>(call);
    return [
      {
        intent: 'shopping.order_status',
        goal: `Look up order ${order.order_id} and tell the user its status.`,
        user: ctx.rng.pick([`Where is my order ${order.order_id}?`, `What is the status of my order ${order.order_id}?`]),
        steps: [{ think: ctx.think(`The user gave the order id ${order.order_id}.`, `I will call get_order_status with order_id ${order.order_id}.`), calls: [call] }],
        replyThink: ctx.reflect(`The order is ${s.status}.`),
        reply: `Your ${statusText(s)}.`,
        answerFacts: statusFacts(s),
        requiresTool: true,
      },
    ];
  }),
  opener('shopping.two_orders', (ctx) => {
    const [a, b] = ctx.rng.sample(existingOrders(ctx.worldSeed), 2) as [OrderFacts, OrderFacts];
    const calls = [ctx.call('get_order_status', { order_id: a.order_id }), ctx.call('get_order_status', { order_id: b.order_id })];
    const [sa, sb] = calls.map((c) => resultOf<OrderStatus>(c)) as [OrderStatus, OrderStatus];
    return [
      {
        intent: 'shopping.two_orders',
        goal: `Look up orders ${a.order_id} and ${b.order_id} and tell the user the status of each.`,
        user: ctx.rng.pick([`Can you check my orders ${a.order_id} and ${b.order_id}?`, `What is the status of ${a.order_id} and ${b.order_id}?`]),
        steps: [
          {
            think: ctx.think(`There are two orders to check: ${a.order_id} and ${b.order_id}.`, 'I will call get_order_status for both orders at the same time.'),
            calls,
          },
        ],
        replyThink: ctx.reflect(`${a.order_id} is ${sa.status} and ${b.order_id} is ${sb.status}.`),
        reply: `Your ${statusText(sa)}. Your ${statusText(sb)}.`,
        answerFacts: [...statusFacts(sa), ...statusFacts(sb)],
        requiresTool: true,
      },
    ];
  }),
];
