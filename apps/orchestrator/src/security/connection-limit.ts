import { Server } from 'http';
import { Socket } from 'net';
import type { LoomEnv } from '@loom/agent-kit';
import type { ConnectionBound } from '../metrics/metrics.service';
import { countDown } from './counts';

/**
 * Open connections per remote address, at most `perAddress`: one more is destroyed as it
 * arrives, unanswered, so one address cannot take every connection the server allows. An
 * address's entry goes with its last connection, so a flood of addresses leaves nothing behind.
 */
export class ConnectionLimit {
  private readonly open = new Map<string, number>();

  constructor(
    private readonly perAddress: number,
    private readonly onRefused: () => void = () => undefined,
  ) {}

  /** Counts `socket` against its address until it closes, or destroys it past the limit. */
  admit(socket: Socket): void {
    const address = socket.remoteAddress;
    // Reset by its peer before it was seen: nothing to answer, nor to give back later.
    if (address === undefined) return void socket.destroy();
    const held = this.open.get(address) ?? 0;
    if (held >= this.perAddress) {
      socket.destroy();
      return this.onRefused();
    }
    this.open.set(address, held + 1);
    socket.once('close', () => countDown(this.open, address));
  }

  /** Connections open from `address`. */
  heldBy(address: string): number {
    return this.open.get(address) ?? 0;
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
