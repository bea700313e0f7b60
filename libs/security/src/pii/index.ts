export {
  cardNetwork,
  cnIdCheckChar,
  cnIdValid,
  ipv4Valid,
  isRealDate,
  luhnValid,
  nanpValid,
  ssnValid,
} from './checksums';
export {
  apiKeyDetector,
  DETECTORS,
  emailDetector,
  ipDetector,
  numericDetector,
  passportDetector,
  passwordDetector,
  phoneDetector,
  ssnDetector,
} from './detectors';
export { detectPii, redactDeep, redactPii, resolveSpans, sensitiveKeyType } from './redact';
export { redactedReason } from './error-reason';
export type { RedactDeepOptions, RedactOptions } from './redact';
export { PII_TYPES, placeholder, TYPE_PRIORITY } from './types';
export type { Detector, PiiSpan, PiiType } from './types';
