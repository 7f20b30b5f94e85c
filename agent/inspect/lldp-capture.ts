// Listening for LLDP. Node cannot open AF_PACKET sockets, so each interface gets a `tcpdump` that stops
// after the first LLDP frame and writes it as pcap to stdout. tcpdump puts the NIC in promiscuous mode
// while it runs (as IPA does) and restores it on exit. Like IPA, links are not brought up, and every
// interface without a frame within the window gets []. An interface whose capture failed is left out (its
// inventory `lldp` is then null, IPA's value for "not collected"), and the others keep their frames.
import { spawn } from 'node:child_process';
import { LLDP_ETHERTYPE, parseLldpFrame, pcapPackets, type LldpTlv } from './lldp.ts';

export interface CaptureOptions {
  timeoutS: number;
  /** The capture tool (tests may point at another path). */
  tcpdump?: string;
}

function captureOne(name: string, opts: CaptureOptions): Promise<LldpTlv[]> {
  return new Promise((resolve, reject) => {
    const args = ['-i', name, '-U', '-c', '1', '-w', '-', 'ether', 'proto', `0x${LLDP_ETHERTYPE.toString(16)}`];
    const child = spawn(opts.tcpdump ?? 'tcpdump', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    let windowClosed = false;
    const timer = setTimeout(() => {
      windowClosed = true;
      child.kill('SIGTERM');
    }, opts.timeoutS * 1000);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run tcpdump: ${err.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      let frames: Buffer[] = [];
      try {
        frames = pcapPackets(Buffer.concat(out));
      } catch (err) {
        if (!windowClosed) return reject(new Error(`tcpdump on ${name}: ${(err as Error).message}`));
      }
      if (frames.length > 0) return resolve(parseLldpFrame(frames[0]!));
      // Stopped at the end of the window (tcpdump exits 0 on SIGTERM): no frame arrived.
      if (windowClosed) return resolve([]);
      reject(new Error(`tcpdump on ${name} exited with ${code}: ${stderr.trim().split('\n').at(-1) ?? ''}`));
    });
  });
}

export interface LldpCapture {
  /** The first frame's TLVs per interface listened to; [] where none came within the window. */
  frames: Record<string, LldpTlv[]>;
  /** Why an interface could not be listened to, per interface. */
  errors: Record<string, string>;
}

/** The first LLDP frame's TLVs per interface, all interfaces listened to at once. */
export async function captureLldp(names: readonly string[], opts: CaptureOptions): Promise<LldpCapture> {
  const results = await Promise.allSettled(names.map((n) => captureOne(n, opts)));
  const capture: LldpCapture = { frames: {}, errors: {} };
  results.forEach((r, i) => {
    if (r.status === 'fulfilled') capture.frames[names[i]!] = r.value;
    else capture.errors[names[i]!] = (r.reason as Error).message;
  });
  return capture;
}
