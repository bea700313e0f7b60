// The links of README.md and docs/*.md: every relative link names a file of the repository, and
// every #anchor a heading of its target (GitHub's slugs). Pure fs, no server: a unit test.
import * as fs from 'fs';
import * as path from 'path';

const root = path.resolve(__dirname, '..');
const docsDir = path.join(root, 'docs');
const markdownFiles = [
  path.join(root, 'README.md'),
  ...fs
    .readdirSync(docsDir)
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => path.join(docsDir, name)),
];

interface Link {
  file: string;
  line: number;
  target: string;
}

/** The lines outside fenced code blocks, with their numbers. */
function outsideFences(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fence: string | null = null;
  text.split('\n').forEach((raw, i) => {
    const opener = /^\s*(`{3,}|~{3,})/.exec(raw);
    if (opener) {
      if (fence === null) fence = opener[1][0];
      else if (opener[1][0] === fence) fence = null;
    } else if (fence === null) out.push({ line: i + 1, text: raw });
  });
  return out;
}

function linksOf(file: string): Link[] {
  const links: Link[] = [];
  for (const { line, text } of outsideFences(fs.readFileSync(file, 'utf8'))) {
    const prose = text.replace(/(`+)[^`]*?\1/g, ''); // code spans hold no links
    for (const m of prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      links.push({ file, line, target: m[1] });
  }
  return links;
}

/** GitHub's heading anchor: lower-case, punctuation but - and _ dropped, spaces as -. */
function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a markdown file's headings give (a repeated slug gets -1, -2 …, as on GitHub). */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const { text } of outsideFences(fs.readFileSync(file, 'utf8'))) {
    const m = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(text);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** What is wrong with one link, or null. */
function problemOf(link: Link): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.target) || link.target.startsWith('//')) return null;
  const hash = link.target.indexOf('#');
  const pathPart = hash < 0 ? link.target : link.target.slice(0, hash);
  const anchor = hash < 0 ? null : decodeURIComponent(link.target.slice(hash + 1));
  const target = pathPart
    ? path.resolve(path.dirname(link.file), decodeURIComponent(pathPart))
    : link.file;
  if (!fs.existsSync(target)) return 'no such file';
  if (anchor === null || !target.endsWith('.md')) return null;
  return anchorsOf(target).has(anchor)
    ? null
    : `no heading #${anchor} in ${path.relative(root, target)}`;
}

describe('documentation links', () => {
  const links = markdownFiles.flatMap(linksOf);

  it('finds the links of README.md and docs/*.md', () => {
    expect(markdownFiles.length).toBeGreaterThan(1);
    expect(links.length).toBeGreaterThan(markdownFiles.length);
  });

  it('points every relative link at an existing file, and every #anchor at a heading there', () => {
    const broken = links.flatMap((link) => {
      const problem = problemOf(link);
      return problem === null
        ? []
        : [`${path.relative(root, link.file)}:${link.line}: (${link.target}) ${problem}`];
    });
    expect(broken).toEqual([]);
  });

  it('lists every docs/ file in README.md', () => {
    const fromReadme = new Set(
      links
        .filter((link) => link.file === markdownFiles[0])
        .map((link) => path.resolve(root, link.target.split('#')[0])),
    );
    const unlisted = markdownFiles.slice(1).filter((file) => !fromReadme.has(file));
    expect(unlisted.map((file) => path.relative(root, file))).toEqual([]);
  });

  it('slugs headings as GitHub does', () => {
    expect(slug('HTTP API (orchestrator)')).toBe('http-api-orchestrator');
    expect(slug('The session library (`libs/session`)')).toBe('the-session-library-libssession');
    expect(slug('Redis key layout')).toBe('redis-key-layout');
    expect(slug('snake_case & more')).toBe('snake_case--more');
  });
});
