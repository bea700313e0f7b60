export * from './statute.types';
export * from './keyword-match';
export { chineseNumeral } from './statute-builder';
export { STATUTES, getStatute, searchStatutes } from './statutes';
export type { StatuteSearchOptions } from './statutes';
