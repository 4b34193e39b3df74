/** Banking dialogues: balances (single, parallel, after asking for the account), transactions, transfers, conversion. */
import { ACCOUNT_IDS, balanceOf, CURRENCY_CODES, type Currency } from '../catalog';
import { listText, resultOf, scenarioKit, type DraftTurn, type Scenario, type TurnContext } from './scenarioKit';

interface Balance {
  account_id: string;
  owner: string;
  balance: number;
}
interface Transactions {
  transactions: { day: string; description: string; amount: number }[];
}
interface Transfer {
  transfer_id: string;
  new_balance: number;
}
interface Conversion {
  rate: number;
  converted: number;
}

function balanceTurn(ctx: TurnContext, account: string, user: string): DraftTurn {
  const call = ctx.call('get_balance', { account_id: account });
  const r = resultOf<Balance>(call);
  ctx.memory.account = account;
  ctx.memory.balance = r.balance;
  return {
    intent: 'banking.balance',
    goal: `Look up the balance of ${account} and tell the user.`,
    user,
    steps: [{ think: ctx.think(`The user wants the balance of ${account}.`, `I will call get_balance with account_id ${account}.`), calls: [call] }],
    replyThink: ctx.reflect(`The balance of ${account} is ${r.balance} EUR.`),
    reply: `The balance of ${account} (${r.owner}) is ${r.balance} EUR.`,
    answerFacts: [String(r.balance)],
    requiresTool: true,
  };
}

function transactionsTurn(ctx: TurnContext, account: string, named: boolean): DraftTurn {
  const limit = ctx.rng.chance(0.6) ? ctx.rng.int(2, 5) : undefined;
  const which = named ? account : 'that account';
  const user =
    limit === undefined
      ? ctx.rng.pick([`What are the recent payments on ${which}?`, `Show me the recent transactions of ${which}.`])
      : ctx.rng.pick([`Show me the last ${limit} transactions of ${which}.`, `What were the last ${limit} payments on ${which}?`]);
  const call = ctx.call('list_transactions', limit === undefined ? { account_id: account } : { account_id: account, limit });
  const txs = resultOf<Transactions>(call).transactions;
  ctx.memory.account = account;
  return {
    intent: 'banking.transactions',
    goal: `List the ${limit === undefined ? 'recent' : `last ${limit}`} transactions of ${account} with their amounts.`,
    user,
    steps: [
      {
        think: ctx.think(`The user wants the transactions of ${account}.`, `I will call list_transactions with account_id ${account}${limit === undefined ? '' : ` and limit ${limit}`}.`),
        calls: [call],
      },
    ],
    replyThink: ctx.reflect('I have the transactions, newest first.', 'Negative amounts are payments.'),
    reply: `Here are the latest transactions of ${account}: ${listText(txs.map((t) => `${t.description} on ${t.day} for ${t.amount} EUR`))}.`,
    answerFacts: txs.map((t) => String(t.amount)),
    requiresTool: true,
  };
}

const { opener, followup, askBack } = scenarioKit('banking');

export const bankingScenarios: Scenario[] = [
  opener('banking.balance', (ctx) => {
    const account = ctx.rng.pick(ACCOUNT_IDS);
    return [balanceTurn(ctx, account, ctx.rng.pick([`What is the balance of my account ${account}?`, `How much money is in ${account}?`]))];
  }),
  askBack('banking.ask_account', {
    goal: 'Ask the user for the account id, without calling a tool and without guessing an account.',
    users: ['How much money do I have?', 'What is my balance?'],
    why: ['The user did not say which account.', 'get_balance needs an account_id, so I must ask for it.'],
    reply: 'Which account should I check? Please give me the account id.',
    values: ACCOUNT_IDS,
    answer: (ctx, account) => balanceTurn(ctx, account, ctx.rng.pick([`It is ${account}.`, `My account is ${account}.`])),
  }),
  opener('banking.transactions', (ctx) => [transactionsTurn(ctx, ctx.rng.pick(ACCOUNT_IDS), true)]),
  followup('banking.transactions', (m) => m.account !== undefined, (ctx) => [transactionsTurn(ctx, ctx.memory.account as string, false)]),
  opener('banking.transfer', (ctx) => {
    const [from, to] = ctx.rng.sample(ACCOUNT_IDS, 2) as [string, string];
    const balance = balanceOf(ctx.worldSeed, from);
    // Mostly affordable amounts; one in five is more than the account holds.
    const amount = ctx.rng.chance(0.8) ? 10 * ctx.rng.int(1, Math.max(1, Math.floor((balance * 0.8) / 10))) : 10 * Math.ceil(balance / 10) + 10 * ctx.rng.int(1, 20);
    const check = ctx.call('get_balance', { account_id: from });
    const b = resultOf<Balance>(check);
    ctx.memory.account = from;
    const turn: DraftTurn = {
      intent: 'banking.transfer',
      goal: `Check that ${from} holds at least ${amount} EUR, then send ${amount} EUR from ${from} to ${to} with transfer_money and report the transfer id and new balance.`,
      user: ctx.rng.pick([`Please send ${amount} EUR from ${from} to ${to}.`, `Transfer ${amount} EUR from my account ${from} to ${to}, please.`]),
      steps: [{ think: ctx.think(`Before I send money I should check that ${from} has enough.`, `I will call get_balance with account_id ${from}.`), calls: [check] }],
      replyThink: '',
      reply: '',
      answerFacts: [],
      requiresTool: true,
    };
    if (b.balance < amount) {
      turn.goal = `Check the balance of ${from} and tell the user that ${b.balance} EUR is not enough to send ${amount} EUR; do not transfer.`;
      turn.replyThink = ctx.reflect(`${from} has only ${b.balance} EUR, which is less than ${amount} EUR.`, 'I must not send the money.');
      turn.reply = `Sorry, ${from} has only ${b.balance} EUR, which is not enough to send ${amount} EUR.`;
      turn.answerFacts = [String(b.balance)];
      return [turn];
    }
    const send = ctx.call('transfer_money', { from_account: from, to_account: to, amount });
    const t = resultOf<Transfer>(send);
    turn.steps.push({ think: ctx.think(`${from} has ${b.balance} EUR, which is enough.`, `I will call transfer_money from ${from} to ${to} with amount ${amount}.`), calls: [send] });
    turn.replyThink = ctx.reflect(`The transfer ${t.transfer_id} is done and the new balance is ${t.new_balance} EUR.`);
    turn.reply = `Done: I sent ${amount} EUR from ${from} to ${to}. The transfer id is ${t.transfer_id} and the new balance of ${from} is ${t.new_balance} EUR.`;
    turn.answerFacts = [t.transfer_id, String(t.new_balance)];
    return [turn];
  }),
  opener('banking.convert', (ctx) => {
    const [from, to] = ctx.rng.sample(CURRENCY_CODES, 2) as [Currency, Currency];
    const amount = 10 * ctx.rng.int(2, 50);
    const call = ctx.call('convert_currency', { amount, from_currency: from, to_currency: to });
    const r = resultOf<Conversion>(call);
    return [
      {
        intent: 'banking.convert',
        goal: `Convert ${amount} ${from} to ${to} and tell the user the result.`,
        user: ctx.rng.pick([`How much is ${amount} ${from} in ${to}?`, `Convert ${amount} ${from} to ${to}, please.`]),
        steps: [{ think: ctx.think(`The user wants ${amount} ${from} in ${to}.`, `I will call convert_currency with amount ${amount}, from_currency ${from} and to_currency ${to}.`), calls: [call] }],
        replyThink: ctx.reflect(`The rate is ${r.rate}, so the result is ${r.converted} ${to}.`),
        reply: `${amount} ${from} is ${r.converted} ${to} at a rate of ${r.rate}.`,
        answerFacts: [String(r.converted)],
        requiresTool: true,
      },
    ];
  }),
  followup('banking.balance_in_currency', (m) => m.balance !== undefined && m.lastIntent === 'banking.balance', (ctx) => {
    const balance = ctx.memory.balance as number;
    const to = ctx.rng.pick(CURRENCY_CODES.filter((c) => c !== 'EUR'));
    const call = ctx.call('convert_currency', { amount: balance, from_currency: 'EUR', to_currency: to });
    const r = resultOf<Conversion>(call);
    return [
      {
        intent: 'banking.balance_in_currency',
        goal: `Convert the balance of ${balance} EUR from the previous answer to ${to} and tell the user.`,
        user: ctx.rng.pick([`How much is that in ${to}?`, `And what is that in ${to}?`]),
        steps: [{ think: ctx.think(`The balance was ${balance} EUR.`, `I will call convert_currency with amount ${balance}, from_currency EUR and to_currency ${to}.`), calls: [call] }],
        replyThink: ctx.reflect(`${balance} EUR is ${r.converted} ${to}.`),
        reply: `${balance} EUR is ${r.converted} ${to} at a rate of ${r.rate}.`,
        answerFacts: [String(r.converted)],
        requiresTool: true,
      },
    ];
  }),
  opener('banking.two_balances', (ctx) => {
    const [a, b] = ctx.rng.sample(ACCOUNT_IDS, 2) as [string, string];
    const calls = [ctx.call('get_balance', { account_id: a }), ctx.call('get_balance', { account_id: b })];
    const [ra, rb] = calls.map((c) => resultOf<Balance>(c)) as [Balance, Balance];
    return [
      {
        intent: 'banking.two_balances',
        goal: `Look up the balances of ${a} and ${b} and tell the user both.`,
        user: ctx.rng.pick([`What are the balances of ${a} and ${b}?`, `How much money is in ${a} and in ${b}?`]),
        steps: [{ think: ctx.think(`I need two balances: ${a} and ${b}.`, 'I will call get_balance for both accounts at the same time.'), calls }],
        replyThink: ctx.reflect(`${a} has ${ra.balance} EUR and ${b} has ${rb.balance} EUR.`),
        reply: `${a} has ${ra.balance} EUR and ${b} has ${rb.balance} EUR.`,
        answerFacts: [String(ra.balance), String(rb.balance)],
        requiresTool: true,
      },
    ];
  }),
];
