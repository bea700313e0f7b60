/** A seeded pseudo-random source (mulberry32), so a chaos run's choices can be replayed. */
export class SeededRandom {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** A float in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)];
  }

  /** A new source whose sequence depends only on this seed and `salt`. */
  fork(salt: number): SeededRandom {
    return new SeededRandom(Math.imul(this.state ^ 0x9e3779b9, salt + 1) ^ salt);
  }

  /** `length` characters of [a-z0-9]. */
  token(length: number): string {
    const chars = 'abcdefghijklmnopqrstuvwxyz0123456789';
    return Array.from({ length }, () => this.pick([...chars])).join('');
  }
}
