import { BaseRpcContext } from '@nestjs/microservices';

type RedisStreamsContextArgs = [
  pattern: string,
  entryId: string,
  deliveryCount: number,
  signal: AbortSignal,
];

/** What a handler can learn about the stream entry it is processing (inject with `@Ctx()`). */
export class RedisStreamsContext extends BaseRpcContext<RedisStreamsContextArgs> {
  /** The pattern the request was sent to. */
  getPattern(): string {
    return this.args[0];
  }

  /** The id of the request's entry in its stream. */
  getEntryId(): string {
    return this.args[1];
  }

  /** 1 on the first delivery; higher when the entry was reclaimed from a dead consumer. */
  getDeliveryCount(): number {
    return this.args[2];
  }

  /**
   * Aborts when the server stops waiting for the handler: at the request's deadline (its
   * caller has given up), when the request was dead-lettered or skipped behind the handler's
   * back, and when the server closes past its drain; the reason is a `HandlerCancelled`.
   */
  getSignal(): AbortSignal {
    return this.args[3];
  }
}
