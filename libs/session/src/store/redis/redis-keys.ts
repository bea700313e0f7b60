/**
 * The Redis key layout (docs/session-library.md, "Redis key layout"). Everything of one session
 * carries the hash tag {sessionId}, so multi-key scripts run on Redis Cluster; `prefix` is
 * LOOM_KEY_PREFIX.
 *
 *   <prefix>s:{<sid>}:<stateKey>        string   single value (JSON)
 *   <prefix>s:{<sid>}:<stateKey>:list   zset     list items, score = index, member "<index>|<json>";
 *                                                 member "!" at score 0 marks the list as complete
 *   <prefix>s:{<sid>}:_keys             set      the session's state keys (seed 003)
 *   <prefix>s:{<sid>}:_meta             hash     tenant, user, u:<stateKey> = updatedAt ms
 *   <prefix>s:{<sid>}:_fence            string   fencing-token counter
 *   <prefix>s:{<sid>}:lock              string   conversation lock (token), PX
 *   <prefix>lockholder:<holderId>       string   a lock-holding process's liveness, PX
 *   <prefix>s:{<sid>}:_gone             string   tombstone of a deletion (cache mode): refills refused, PX
 *   <prefix>s:{<sid>}:_gone:<stateKey>  string   tombstone of one key's deletion (cache mode), PX
 *   <prefix>s:{<sid>}:_writing:<stateKey>  zset  durable writes of the key under way (cache mode):
 *                                                 member a write's token, score its deadline (ms)
 *   <prefix>s:{<sid>}:_epoch            string   the session's refill epoch (cache mode), PX
 *   <prefix>idx:{<tenant>}:<stateKey>[:u:<user>]  zset  session ids by updatedAt (standalone backend only)
 */
export class RedisKeys {
  constructor(readonly prefix: string) {}

  session(sid: string): string {
    return `${this.prefix}s:{${sid}}`;
  }
  value(sid: string, key: string): string {
    return `${this.session(sid)}:${key}`;
  }
  list(sid: string, key: string): string {
    return `${this.session(sid)}:${key}:list`;
  }
  keys(sid: string): string {
    return `${this.session(sid)}:_keys`;
  }
  meta(sid: string): string {
    return `${this.session(sid)}:_meta`;
  }
  fence(sid: string): string {
    return `${this.session(sid)}:_fence`;
  }
  gone(sid: string): string {
    return `${this.session(sid)}:_gone`;
  }
  keyGone(sid: string, key: string): string {
    return `${this.session(sid)}:_gone:${key}`;
  }
  writing(sid: string, key: string): string {
    return `${this.session(sid)}:_writing:${key}`;
  }
  epoch(sid: string): string {
    return `${this.session(sid)}:_epoch`;
  }
  lock(sid: string): string {
    return `${this.session(sid)}:lock`;
  }
  lockHolder(holderId: string): string {
    return `${this.prefix}lockholder:${holderId}`;
  }
  index(tenant: string, key: string, user?: string): string {
    return `${this.prefix}idx:{${tenant}}:${key}${user ? `:u:${user}` : ''}`;
  }
}
