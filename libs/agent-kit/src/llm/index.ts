export * from './llm.types';
export { countMessageTokens, countTokens } from './token-counter';
export {
  detectLanguage,
  firstSentence,
  graphemes,
  makeTitle,
  truncate,
  type Language,
} from './text';
export { redactSecrets } from './llm-error';
export { OFFLINE_MODEL, OfflineLlmClient, type OfflineLlmOptions } from './offline.llm';
export { OpenAiLlmClient, type ChatCompletionsApi, type OpenAiLlmOptions } from './openai.llm';
export { createLlmClient, type LlmConfig } from './llm.factory';
