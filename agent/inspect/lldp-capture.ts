// Listening for LLDP. Node cannot open AF_PACKET sockets, so one small helper of ours (lldp-listen.c, built by
// scripts/build-lldp-listen.sh and shipped beside the agent) listens on every interface at once, each in
// promiscuous mode while it listens (as IPA does), and prints the first frame per interface. Like IPA, links are
// not brought up, and every interface without a frame within the window gets []. An interface that could not be
// listened to is left out (its inventory `lldp` is then null, IPA's value for "not collected"), and the others keep
// their frames.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';
import { parseLldpFrame, type LldpTlv } from './lldp.ts';

/** Where the helper is: beside this source file in a checkout, beside agent.cjs in the ramdisk. */
export const LLDP_HELPER = fileURLToPath(new URL('./ina-lldp-listen', import.meta.url));

export interface CaptureOptions {
  timeoutS: number;
  /** The command that runs the helper, arguments to follow (tests run it inside a network namespace). */
  command?: readonly string[];
  log?: Logger;
}

export interface LldpCapture {
  /** The first frame's TLVs per interface listened to; [] where none came within the window. */
  frames: Record<string, LldpTlv[]>;
  /** Why an interface could not be listened to, per interface. */
  errors: Record<string, string>;
}

/** The helper's lines (`IFACE frame HEX`, `IFACE none`, `IFACE error TEXT`) as a capture. */
export function parseHelperOutput(names: readonly string[], stdout: string): LldpCapture {
  const capture: LldpCapture = { frames: {}, errors: {} };
  for (const line of stdout.split('\n')) {
    const m = /^(\S+) (frame|none|error)(?: (.*))?$/.exec(line);
    if (!m || !names.includes(m[1]!)) continue;
    const [, name, kind, rest] = m as unknown as [string, string, string, string | undefined];
    if (kind === 'error') capture.errors[name] = rest ?? 'failed';
    else if (kind === 'none') capture.frames[name] = [];
    else if (rest && /^([0-9a-f]{2})+$/.test(rest)) capture.frames[name] = parseLldpFrame(Buffer.from(rest, 'hex'));
    else capture.errors[name] = 'the helper printed a malformed frame';
  }
  for (const name of names)
    if (!(name in capture.frames) && !(name in capture.errors)) capture.errors[name] = 'no answer from the helper';
  return capture;
}

/** The first LLDP frame's TLVs per interface, all interfaces listened to at once for `timeoutS`. */
export async function captureLldp(names: readonly string[], opts: CaptureOptions): Promise<LldpCapture> {
  if (names.length === 0) return { frames: {}, errors: {} };
  const [file, ...pre] = opts.command ?? [LLDP_HELPER];
  const fail = (why: string): LldpCapture => ({
    frames: {},
    errors: Object.fromEntries(names.map((n) => [n, why])),
  });
  if (!opts.command && !existsSync(LLDP_HELPER)) return fail(`the LLDP helper ${LLDP_HELPER} is missing`);
  const windowMs = Math.round(opts.timeoutS * 1000);
  try {
    // The helper ends its own window; the runner's limit only catches a helper that hangs.
    const r = await run(file!, [...pre, String(windowMs), ...names], {
      log: opts.log,
      timeoutMs: windowMs + 30_000,
      query: true,
    });
    return parseHelperOutput(names, r.stdout);
  } catch (err) {
    return fail((err as Error).message);
  }
}
