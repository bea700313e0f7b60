import { Server } from 'http';
import { isIPv6, Socket } from 'net';
import type { LoomEnv } from '@loom/agent-kit';
import type { ConnectionBound } from '../metrics/metrics.service';
import { countDown } from './counts';

/**
 * What a connection from `address` is counted under: an IPv4 address (an IPv4-mapped IPv6 one as
 * its IPv4 address), or the /64 network of an IPv6 address. One host or one subscriber is given a
 * /64 and can pick a source address from it for every connection, so counted by address it
 * would have no bound at all. Link-local (with a zone) and IPv4-embedding addresses go whole.
 */
export function addressGroup(address: string): string {
  if (!isIPv6(address)) return address;
  const lower = address.toLowerCase();
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(lower);
  if (mapped) return mapped[1];
  if (lower.includes('%') || lower.includes('.')) return lower;
  const [head, tail] = lower.split('::');
  const left = head ? head.split(':') : [];
  const right = tail === undefined ? [] : tail ? tail.split(':') : [];
  const groups =
    tail === undefined
      ? left
      : [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

/**
 * Open connections per remote address (an IPv6 one's /64 network, see addressGroup), at most
 * `perAddress`: one more is destroyed as it arrives, unanswered, so one address cannot take
 * every connection the server allows. An address's entry goes with its last connection, so a
 * flood of addresses leaves nothing behind.
 */
export class ConnectionLimit {
  private readonly open = new Map<string, number>();

  constructor(
    private readonly perAddress: number,
    private readonly onRefused: () => void = () => undefined,
  ) {}

  /** Counts `socket` against its address until it closes, or destroys it past the limit. */
  admit(socket: Socket): void {
    const remote = socket.remoteAddress;
    // Reset by its peer before it was seen: nothing to answer, nor to give back later.
    if (remote === undefined) return void socket.destroy();
    const address = addressGroup(remote);
    const held = this.open.get(address) ?? 0;
    if (held >= this.perAddress) {
      socket.destroy();
      return this.onRefused();
    }
    this.open.set(address, held + 1);
    socket.once('close', () => countDown(this.open, address));
  }

  /** Connections open from `address` (from its /64, for an IPv6 one). */
  heldBy(address: string): number {
    return this.open.get(addressGroup(address)) ?? 0;
  }

  /** Addresses with a connection open. */
  get addresses(): number {
    return this.open.size;
  }
}

/**
 * Bounds the connections `server` holds: HTTP_MAX_CONNECTIONS in all (Node closes one more as it
 * accepts it, unanswered, and emits 'drop'), HTTP_MAX_CONNECTIONS_PER_ADDRESS from one remote
 * address. `onRefused` hears of each connection refused, and by which bound: no answer, no
 * access-log line tells of it otherwise.
 */
export function limitConnections(
  server: Server,
  env: Pick<LoomEnv, 'HTTP_MAX_CONNECTIONS' | 'HTTP_MAX_CONNECTIONS_PER_ADDRESS'>,
  onRefused: (bound: ConnectionBound) => void = () => undefined,
): ConnectionLimit {
  server.maxConnections = env.HTTP_MAX_CONNECTIONS;
  server.on('drop', () => onRefused('total'));
  const limit = new ConnectionLimit(env.HTTP_MAX_CONNECTIONS_PER_ADDRESS, () =>
    onRefused('address'),
  );
  server.on('connection', (socket: Socket) => limit.admit(socket));
  return limit;
}
