# cm2 workers and CLI. Debian slim (the Temporal native bridge has no musl build).
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY . .
ENTRYPOINT [ "node", "bin/cm2.js" ]
