export * from './cls-store';
export * from './logger';
export * from './mdc';
export * from './process-errors';
