/** Bearer-token check of the gateway: constant-time comparison against the configured tokens. */
import { createHash, timingSafeEqual } from 'node:crypto';
import { BraidError } from '../errors.js';

const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

export class TokenSet {
  private readonly digests: Buffer[];

  constructor(tokens: string[]) {
    this.digests = tokens.map(digest);
  }

  has(token: string): boolean {
    const d = digest(token);
    let found = false;
    // compare against every token so the time taken does not reveal which one matched
    for (const known of this.digests) found = timingSafeEqual(known, d) || found;
    return found;
  }

  /**
   * Returns the token of an `Authorization: Bearer <token>` header, or throws
   * a 401 `unauthorized` error.
   */
  check(header: string | undefined): string {
    const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header ?? '');
    if (!match) throw new BraidError('unauthorized', 'missing Authorization: Bearer <token> header');
    const token = match[1]!;
    if (!this.has(token)) throw new BraidError('unauthorized', 'bearer token is not valid');
    return token;
  }
}
