/** Banking domain: balances, recent transactions, transfers between accounts, currency conversion. */
import { balanceOf, CURRENCY_CODES, exchangeRate, findAccount, transactionsOf, type Currency } from '../catalog';
import { hash32 } from '../random';
import { defineTools, fail, notFound, ok, round2, stringParam } from '../worldTypes';


export const bankingTools = defineTools('banking', {
  get_balance: {
    description: 'Get the balance of a bank account in EUR and the name of its owner.',
    parameters: {
      account_id: stringParam('Account id, for example acc-101'),
    },
    execute(args, seed) {
      const a = findAccount(String(args.account_id));
      if (!a) return notFound('account', args.account_id);
      return ok({ account_id: a.id, owner: a.owner, balance: balanceOf(seed, a.id), currency: 'EUR' });
    },
  },
  list_transactions: {
    description: 'List the most recent transactions of a bank account, newest first. Negative amounts are payments, positive amounts are money received.',
    parameters: {
      account_id: stringParam('Account id, for example acc-101'),
      limit: { type: 'integer', description: 'How many transactions to return, from 1 to 5', minimum: 1, maximum: 5, default: 3 },
    },
    execute(args, seed) {
      const a = findAccount(String(args.account_id));
      if (!a) return notFound('account', args.account_id);
      return ok({ account_id: a.id, currency: 'EUR', transactions: transactionsOf(seed, a.id).slice(0, Number(args.limit)).map((t) => ({ ...t })) });
    },
  },
  transfer_money: {
    description: 'Send money in EUR from one bank account to another. Fails if the first account does not have enough money.',
    parameters: {
      from_account: stringParam('Account id to take the money from'),
      to_account: stringParam('Account id to send the money to'),
      amount: { type: 'number', description: 'Amount in EUR, more than 0', minimum: 0.01 },
    },
    execute(args, seed) {
      const from = findAccount(String(args.from_account));
      if (!from) return notFound('account', args.from_account);
      const to = findAccount(String(args.to_account));
      if (!to) return notFound('account', args.to_account);
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
    description: 'Convert an amount of money from one currency to another at the current rate.',
    parameters: {
      amount: { type: 'number', description: 'Amount to convert', minimum: 0 },
      from_currency: { type: 'string', description: 'Currency of the amount', enum: CURRENCY_CODES },
      to_currency: { type: 'string', description: 'Currency to convert to', enum: CURRENCY_CODES },
    },
    execute(args) {
      const from = args.from_currency as Currency;
      const to = args.to_currency as Currency;
      const rate = exchangeRate(from, to);
      const amount = Number(args.amount);
      return ok({ amount, from_currency: from, to_currency: to, rate, converted: round2(amount * rate) });
    },
  },
});
