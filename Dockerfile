# cm2 workers and CLI. Debian slim (the Temporal native bridge has no musl build).
# Model work runs on native TensorFlow: scripts/ensure-native.mjs fetches PyPI's tensorflow-cpu wheel (or, with
# CM2_NATIVE=gpu, the CUDA build and its pip CUDA libraries) and compiles tfjs-node's addon against it.
FROM node:20-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY . .
ARG CM2_NATIVE=cpu
ENV CM2_CACHE_DIR=/opt/cm2-cache PIP_BREAK_SYSTEM_PACKAGES=1
RUN CM2_NATIVE=$CM2_NATIVE node scripts/ensure-native.mjs
ENTRYPOINT [ "node", "bin/cm2.js" ]
