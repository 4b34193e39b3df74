/** Shopping domain: product search and details, placing an order, and order status. */
import {
  deliveryDaysFor,
  existingOrders,
  findProduct,
  MAX_ORDER_QUANTITY,
  newOrderId,
  productFacts,
  PRODUCTS,
  searchProducts,
} from '../catalog';
import { defineTools, fail, notFound, ok, round2, stringParam } from '../worldTypes';

const productIdParam = stringParam('Product id, for example p-101');

export const shoppingTools = defineTools('shopping', {
  search_products: {
    description: 'Search the shop for products by name. Returns the matching products, cheapest first, with id, name, price in EUR and stock.',
    parameters: {
      query: stringParam('Words to search for, for example lamp'),
      max_price: { type: 'number', description: 'Only return products that cost at most this price in EUR', minimum: 0 },
    },
    optional: ['max_price'],
    execute(args, seed) {
      const maxPrice = typeof args.max_price === 'number' ? args.max_price : undefined;
      const results = searchProducts(seed, String(args.query), maxPrice).map((p) => ({ product_id: p.product_id, name: p.name, price: p.price, stock: p.stock }));
      return ok({ query: String(args.query), results });
    },
  },
  get_product: {
    description: 'Get the details of one product: name, price in EUR, stock and rating.',
    parameters: { product_id: productIdParam },
    execute(args, seed) {
      const p = findProduct(String(args.product_id));
      if (!p) return notFound('product', args.product_id);
      const f = productFacts(seed, p);
      return ok({ product_id: f.product_id, name: f.name, price: f.price, stock: f.stock, rating: f.rating });
    },
  },
  place_order: {
    description: 'Order a product. Returns the order id, the total price in EUR and the delivery time in days.',
    parameters: {
      product_id: productIdParam,
      quantity: { type: 'integer', description: `How many to order, from 1 to ${MAX_ORDER_QUANTITY}`, minimum: 1, maximum: MAX_ORDER_QUANTITY },
    },
    execute(args, seed) {
      const p = findProduct(String(args.product_id));
      if (!p) return notFound('product', args.product_id);
      const f = productFacts(seed, p);
      const quantity = Number(args.quantity);
      if (f.stock === 0) return fail('out_of_stock', `product ${f.product_id} is out of stock`);
      if (quantity > f.stock) return fail('out_of_stock', `only ${f.stock} of product ${f.product_id} in stock`);
      return ok({
        order_id: newOrderId(seed, PRODUCTS.indexOf(p), quantity),
        product_id: f.product_id,
        name: f.name,
        quantity,
        unit_price: f.price,
        total: round2(f.price * quantity),
        status: 'confirmed',
        delivery_days: deliveryDaysFor(seed, f.product_id),
      });
    },
  },
  get_order_status: {
    description: 'Get the status of an order: processing, shipped or delivered, and the days until delivery.',
    parameters: {
      order_id: stringParam('Order id, for example ord-1234'),
    },
    execute(args, seed) {
      const id = String(args.order_id).trim().toLowerCase();
      const existing = existingOrders(seed).find((o) => o.order_id === id);
      if (existing) return ok({ ...existing });
      // An order confirmed by place_order: decode (product, quantity) from the id.
      for (const [index, p] of PRODUCTS.entries()) {
        for (let q = 1; q <= MAX_ORDER_QUANTITY; q++) {
          if (newOrderId(seed, index, q) === id) {
            return ok({ order_id: id, status: 'processing', product_id: p.id, name: p.name, quantity: q, delivery_days: deliveryDaysFor(seed, p.id) });
          }
        }
      }
      return notFound('order', args.order_id);
    },
  },
});
