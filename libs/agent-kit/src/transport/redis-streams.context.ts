import { BaseRpcContext } from '@nestjs/microservices';

type RedisStreamsContextArgs = [pattern: string, entryId: string, deliveryCount: number];

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
}
