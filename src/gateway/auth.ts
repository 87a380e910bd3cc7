/** The gateway's bearer-token check: the shared one of src/auth.ts (scopes, constant-time comparison). */
export { TokenSet, bearerToken, tokenId } from '../auth.js';
