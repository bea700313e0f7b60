# One image per app of the monorepo: docker build --build-arg APP=labor-law-agent .
# (docker-compose.yml builds all four). The apps read their configuration from the environment (API.md).
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json nest-cli.json ./
COPY scripts ./scripts
COPY apps ./apps
COPY libs ./libs
RUN npm run build && npm prune --omit=dev

FROM node:20-slim
ARG APP=orchestrator
ENV APP=${APP} NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
USER node
EXPOSE 3000
CMD ["sh", "-c", "exec node dist/apps/$APP/main.js"]
