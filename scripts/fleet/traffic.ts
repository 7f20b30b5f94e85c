// What each of the fleet's nginx servers sent, from its access log (stack.sh's `fleet` format:
// addr "request" status bytes "range" time): GETs, those with a Range, bytes, bytes per file asked for, and
// restarts from zero (a second Range-less GET of a file already sent, i.e. a download begun again).
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface Traffic {
  server: string;
  requests: number;
  ranged: number;
  bytes: number;
  /** Bytes sent per path, in the order first asked for. */
  perNode: number[];
  restarts: number;
}

export type TrafficMark = Map<string, number>;

const LINE = /^(\S+) "(\w+) (\S+) [^"]*" (\d+) (\d+) "([^"]*)"/;

async function logs(run: string): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  for (const dir of (await readdir(run)).filter((d) => d.startsWith('nginx-')).sort()) {
    const text = await readFile(join(run, dir, 'access.log'), 'utf8').catch(() => '');
    out.set(dir.slice('nginx-'.length), text.split('\n').filter(Boolean));
  }
  return out;
}

/** With `since` (an earlier call's result), only the requests logged after it; the result carries a mark. */
export async function imageServerTraffic(run: string, since?: Traffic[] & { mark?: TrafficMark }) {
  const mark: TrafficMark = new Map();
  const result: Traffic[] & { mark?: TrafficMark } = [];
  for (const [server, lines] of await logs(run)) {
    mark.set(server, lines.length);
    const fresh = lines.slice(since?.mark?.get(server) ?? 0);
    const perPath = new Map<string, { bytes: number; full: number }>();
    let requests = 0;
    let ranged = 0;
    let bytes = 0;
    for (const line of fresh) {
      const m = LINE.exec(line);
      if (!m) continue;
      if (m[2] !== 'GET') continue;
      requests++;
      const sent = Number(m[5]);
      bytes += sent;
      const hasRange = m[6] !== '-' && m[6] !== '';
      if (hasRange) ranged++;
      const p = perPath.get(m[3]!) ?? { bytes: 0, full: 0 };
      p.bytes += sent;
      if (!hasRange) p.full++;
      perPath.set(m[3]!, p);
    }
    const restarts = [...perPath.values()].reduce((n, p) => n + Math.max(0, p.full - 1), 0);
    result.push({ server, requests, ranged, bytes, perNode: [...perPath.values()].map((p) => p.bytes), restarts });
  }
  result.mark = mark;
  return result;
}
