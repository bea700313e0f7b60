import { Server } from 'http';
import { Socket } from 'net';
import type { LoomEnv } from '@loom/agent-kit';

/**
 * Open connections per remote address, at most `perAddress`: one more is destroyed as it
 * arrives, unanswered, so one address cannot take every connection the server allows. An
 * address's entry goes with its last connection, so a flood of addresses leaves nothing behind.
 */
export class ConnectionLimit {
  private readonly open = new Map<string, number>();

  constructor(private readonly perAddress: number) {}

  /** Counts `socket` against its address until it closes, or destroys it past the limit. */
  admit(socket: Socket): void {
    const address = socket.remoteAddress;
    // Reset by its peer before it was seen: nothing to answer, nor to give back later.
    if (address === undefined) return void socket.destroy();
    const held = this.open.get(address) ?? 0;
    if (held >= this.perAddress) return void socket.destroy();
    this.open.set(address, held + 1);
    socket.once('close', () => {
      const left = (this.open.get(address) ?? 1) - 1;
      if (left > 0) this.open.set(address, left);
      else this.open.delete(address);
    });
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
 * accepts it, unanswered), HTTP_MAX_CONNECTIONS_PER_ADDRESS from one remote address.
 */
export function limitConnections(
  server: Server,
  env: Pick<LoomEnv, 'HTTP_MAX_CONNECTIONS' | 'HTTP_MAX_CONNECTIONS_PER_ADDRESS'>,
): ConnectionLimit {
  server.maxConnections = env.HTTP_MAX_CONNECTIONS;
  const limit = new ConnectionLimit(env.HTTP_MAX_CONNECTIONS_PER_ADDRESS);
  server.on('connection', (socket: Socket) => limit.admit(socket));
  return limit;
}
