/** Banking domain: balances, recent transactions, transfers between accounts, currency conversion. */
import { balanceOf, CURRENCY_CODES, exchangeRate, findAccount, transactionsOf, type Currency } from '../catalog';
import { hash32 } from '../random';
import { fail, functionSchema, ok, round2, type WorldTool } from '../types';

const accountParam = (description: string) => ({ type: 'string' as const, description });
const unknownAccount = (id: unknown) => fail('not_found', `unknown account "${String(id)}"`);

export const bankingTools: Record<string, WorldTool> = {
  get_balance: {
    domain: 'banking',
    schema: functionSchema('get_balance', 'Get the balance of a bank account in EUR and the name of its owner.', {
      account_id: accountParam('Account id, for example acc-101'),
    }, ['account_id']),
    execute(args, seed) {
      const a = findAccount(String(args.account_id));
      if (!a) return unknownAccount(args.account_id);
      return ok({ account_id: a.id, owner: a.owner, balance: balanceOf(seed, a.id), currency: 'EUR' });
    },
  },
  list_transactions: {
    domain: 'banking',
    schema: functionSchema(
      'list_transactions',
      'List the most recent transactions of a bank account, newest first. Negative amounts are payments, positive amounts are money received.',
      {
        account_id: accountParam('Account id, for example acc-101'),
        limit: { type: 'integer', description: 'How many transactions to return, from 1 to 5', minimum: 1, maximum: 5, default: 3 },
      },
      ['account_id'],
    ),
    execute(args, seed) {
      const a = findAccount(String(args.account_id));
      if (!a) return unknownAccount(args.account_id);
      return ok({ account_id: a.id, currency: 'EUR', transactions: transactionsOf(seed, a.id).slice(0, Number(args.limit)).map((t) => ({ ...t })) });
    },
  },
  transfer_money: {
    domain: 'banking',
    schema: functionSchema(
      'transfer_money',
      'Send money in EUR from one bank account to another. Fails if the first account does not have enough money.',
      {
        from_account: accountParam('Account id to take the money from'),
        to_account: accountParam('Account id to send the money to'),
        amount: { type: 'number', description: 'Amount in EUR, more than 0', minimum: 0.01 },
      },
      ['from_account', 'to_account', 'amount'],
    ),
    execute(args, seed) {
      const from = findAccount(String(args.from_account));
      if (!from) return unknownAccount(args.from_account);
      const to = findAccount(String(args.to_account));
      if (!to) return unknownAccount(args.to_account);
      if (from.id === to.id) return fail('invalid_arguments', 'the two accounts must be different');
      const amount = round2(Number(args.amount));
      const balance = balanceOf(seed, from.id);
      if (amount > balance) return fail('insufficient_funds', `account ${from.id} has only ${balance} EUR`);
      return ok({
        transfer_id: `tr-${1000 + (hash32(seed, 'transfer', from.id, to.id, amount) % 9000)}`,
        from_account: from.id,
        to_account: to.id,
        amount,
        currency: 'EUR',
        new_balance: round2(balance - amount),
        status: 'completed',
      });
    },
  },
  convert_currency: {
    domain: 'banking',
    schema: functionSchema(
      'convert_currency',
      'Convert an amount of money from one currency to another at the current rate.',
      {
        amount: { type: 'number', description: 'Amount to convert', minimum: 0 },
        from_currency: { type: 'string', description: 'Currency of the amount', enum: CURRENCY_CODES },
        to_currency: { type: 'string', description: 'Currency to convert to', enum: CURRENCY_CODES },
      },
      ['amount', 'from_currency', 'to_currency'],
    ),
    execute(args) {
      const from = args.from_currency as Currency;
      const to = args.to_currency as Currency;
      const rate = exchangeRate(from, to);
      const amount = Number(args.amount);
      return ok({ amount, from_currency: from, to_currency: to, rate, converted: round2(amount * rate) });
    },
  },
};
