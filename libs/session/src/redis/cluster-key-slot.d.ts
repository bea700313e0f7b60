/** The hash-slot function ioredis itself uses (the package ships no types). */
declare module 'cluster-key-slot' {
  /** Redis Cluster's hash slot of a key (its hash tag, if any), 0..16383. */
  function calculateSlot(key: string | Buffer): number;
  export = calculateSlot;
}
