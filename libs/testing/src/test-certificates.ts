/** A throwaway CA and a server certificate it signed, for a private server's TLS. */
import { execFile } from 'child_process';
import { writeFile } from 'fs/promises';
import { join } from 'path';
import { promisify } from 'util';

const run = promisify(execFile);

export interface TestCertificates {
  /** PEM files: the CA's certificate, and the server's certificate (for 127.0.0.1) and key. */
  ca: string;
  cert: string;
  key: string;
}

/** Writes them into `dir` with openssl (2048-bit RSA, valid a day). */
export async function createTestCertificates(dir: string): Promise<TestCertificates> {
  const [ca, caKey, cert, key, csr, san] = [
    'ca',
    'ca-key',
    'server',
    'server-key',
    'csr',
    'san',
  ].map((name) => join(dir, `${name}.pem`));
  const openssl = (args: string, ...files: string[]) =>
    run('openssl', [...args.split(' '), ...files]);
  await openssl(
    'req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=loom-test-ca -keyout',
    caKey,
    '-out',
    ca,
  );
  await openssl('req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout', key, '-out', csr);
  await writeFile(san, 'subjectAltName=IP:127.0.0.1\n');
  await openssl(
    'x509 -req -days 1 -CAcreateserial -in',
    csr,
    '-CA',
    ca,
    '-CAkey',
    caKey,
    '-extfile',
    san,
    '-out',
    cert,
  );
  return { ca, cert, key };
}
