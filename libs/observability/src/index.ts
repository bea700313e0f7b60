export * from './cls-store';
export * from './logger';
