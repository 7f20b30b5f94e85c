// Image, checksum and config-drive URLs may carry credentials (`http://user:pass@host/image`). IPA's HTTP
// library turns them into HTTP Basic authorization, so operators use such URLs; undici would silently drop
// them and the server would answer 401. Here they become the Authorization header, are removed from the
// request URL, and never appear in a log line or an error.

/** The URL without its credentials, and the Basic authorization they stand for (if any). */
export function splitCredentials(url: string): { url: string; authorization?: string } {
  const parsed = new URL(url);
  if (!parsed.username && !parsed.password) return { url };
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  parsed.username = '';
  parsed.password = '';
  return { url: parsed.toString(), authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` };
}

/** The URL as logs and errors may show it: credentials replaced by `***`. */
export function shownUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  if (!parsed.username && !parsed.password) return url;
  parsed.username = '***';
  parsed.password = '';
  return parsed.toString();
}
