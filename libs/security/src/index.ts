export * from './assignment/assignment-signer';
export * from './pii';
