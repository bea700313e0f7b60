import { emailDetector, ipDetector, phoneDetector } from './contact';
import { passportDetector, ssnDetector } from './identity';
import { numericDetector } from './numeric';
import { apiKeyDetector, passwordDetector } from './secrets';
import type { Detector } from './types';

export { emailDetector, ipDetector, phoneDetector } from './contact';
export { passportDetector, ssnDetector } from './identity';
export { numericDetector } from './numeric';
export { apiKeyDetector, passwordDetector } from './secrets';

/** Every detector, in no particular order: overlaps are settled by `resolveSpans`. */
export const DETECTORS: readonly Detector[] = [
  apiKeyDetector,
  passwordDetector,
  numericDetector,
  ssnDetector,
  passportDetector,
  emailDetector,
  ipDetector,
  phoneDetector,
];
