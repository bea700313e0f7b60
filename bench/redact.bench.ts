/**
 * PII redaction of 100 KB inputs: ordinary text beside the shapes that cost detectors the most
 * (long runs of short digit groups, dotted and hyphenated digits, cards). Every log line, title,
 * summary and conversation metadata is redacted in the request's process, so a slow shape is CPU
 * a client can make a server spend. Needs no database.
 */
import { redactPii } from '@loom/security';
import { ms, sample, summarize, table } from './stats';

const SIZE = 100_000;
const SAMPLES = 20;

const fill = (unit: string) => unit.repeat(Math.ceil(SIZE / unit.length)).slice(0, SIZE);

const INPUTS: Array<[string, string]> = [
  ['prose (en)', fill('My employment contract has a problem with the non-compete clause. ')],
  ['prose (zh)', fill('我跟公司签的劳动合同有问题，竞业限制最长多久？')],
  ['"1 " repeated', fill('1 ')],
  ['"1-" repeated', fill('1-')],
  ['"123 " repeated', fill('123 ')],
  ['"1234 " repeated', fill('1234 ')],
  ['"1." repeated', fill('1.')],
  ['one digit run', fill('7')],
  ['cards', fill('4111 1111 1111 1111, ')],
];

export async function run(): Promise<void> {
  const rows: string[][] = [];
  for (const [name, text] of INPUTS) {
    const s = summarize(
      await sample(async () => void redactPii(text), { count: SAMPLES, warmup: 2 }),
    );
    rows.push([name, ms(s.p50), ms(s.p99), (SIZE / 1024 / (s.p50 / 1000)).toFixed(0)]);
  }
  console.log(`redactPii over ${SIZE / 1000} KB inputs, ${SAMPLES} samples each`);
  console.log(table(['input', 'p50 ms', 'p99 ms', 'KB/s at p50'], rows));
}
