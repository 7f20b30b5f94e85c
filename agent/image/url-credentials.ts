// Image, checksum and config-drive URLs may carry credentials (`http://user:pass@host/image`). IPA's HTTP
// library (python-requests) turns them into HTTP Basic authorization, so operators use such URLs; undici
// would silently drop them and the server would answer 401. Here they become the Authorization header the
// way requests builds it, are removed from the request URL, and never appear in a log line or an error.

/** The userinfo as written in the URL (`user:pass`, `user`, `:pass`), or undefined when there is none. */
function userinfo(url: string): string | undefined {
  return /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)@/i.exec(url)?.[1];
}

/** Percent-decodes what decodes; a stray `%` stays as written, as python's `unquote` leaves it. */
function decode(part: string): string {
  return part.replace(/(?:%[0-9a-f]{2})+/gi, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
}

/**
 * The URL without its credentials, and the Basic authorization they stand for. As with requests, only a
 * user with a password (an empty one counts: `user:@host`) makes a header, encoded as latin1 where it can be.
 */
export function splitCredentials(url: string): { url: string; authorization?: string } {
  const info = userinfo(url);
  if (info === undefined) return { url };
  const parsed = new URL(url);
  parsed.username = '';
  parsed.password = '';
  const colon = info.indexOf(':');
  if (colon < 0) return { url: parsed.toString() };
  const pair = `${decode(info.slice(0, colon))}:${decode(info.slice(colon + 1))}`;
  const bytes = /^[\u0000-\u00ff]*$/.test(pair) ? Buffer.from(pair, 'latin1') : Buffer.from(pair, 'utf8');
  return { url: parsed.toString(), authorization: `Basic ${bytes.toString('base64')}` };
}

/** The URL as logs and errors may show it: any credentials replaced by `***`, even in a URL that does not parse. */
export function shownUrl(url: string): string {
  return userinfo(url) === undefined ? url : url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#]*@/i, '$1***@');
}
