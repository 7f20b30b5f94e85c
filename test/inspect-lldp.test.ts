// LLDP: TLVs from frames in a pcap recorded with tcpdump (test/fixtures/inspect/lldp/leaf.pcap, two
// switch ports' frames sent over a veth pair and captured by the capture path below), and the live capture:
// tcpdump in a network namespace this test creates, frames sent into its veth from the other end.
import { execFileSync, spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeLldp, parseLldpFrame, pcapPackets } from '../agent/inspect/lldp.ts';
import { captureLldp } from '../agent/inspect/lldp-capture.ts';
import { switchFrame } from './helpers/lldp-frames.ts';

const PCAP = join(import.meta.dirname, 'fixtures/inspect/lldp/leaf.pcap');

describe('LLDP frames from a recorded capture', () => {
  it("gives IPA's [type, hex] list up to and including End", async () => {
    const packets = pcapPackets(await readFile(PCAP));
    expect(packets).toHaveLength(2);
    const tlvs = parseLldpFrame(packets[0]!);
    expect(tlvs.map(([t]) => t)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 127, 127, 127, 0]);
    expect(tlvs[0]).toEqual([1, '04001c73aabb01']);
    expect(tlvs.at(-1)).toEqual([0, '']);
    expect(describeLldp(tlvs)).toEqual({
      chassisId: '00:1c:73:aa:bb:01',
      portId: 'Ethernet12',
      systemName: 'leaf-a1.dc1',
    });
    expect(describeLldp(parseLldpFrame(packets[1]!))).toMatchObject({
      portId: 'Ethernet13',
      systemName: 'leaf-a2.dc1',
    });
  });

  it('ignores a runt frame and a truncated TLV; rejects a stream that is not pcap', () => {
    expect(parseLldpFrame(Buffer.alloc(10))).toEqual([]);
    const frame = switchFrame({ src: '00:1c:73:aa:bb:01', port: 'Ethernet12', system: 'x', vlan: 1 });
    expect(parseLldpFrame(frame.subarray(0, 20))).toEqual([]);
    expect(() => pcapPackets(Buffer.alloc(40, 1))).toThrow(/not a pcap/);
  });
});

const NS = `ina-i21-lldp-${process.pid}`;
const haveTools = (() => {
  try {
    execFileSync('sh', ['-c', 'command -v tcpdump && command -v python3 && command -v ip'], { stdio: 'ignore' });
    return process.getuid?.() === 0;
  } catch {
    return false;
  }
})();
if (!haveTools) console.warn('skipping live LLDP capture: needs root, tcpdump, python3 and ip');

describe.skipIf(!haveTools)('live capture with tcpdump in a network namespace', () => {
  let dir: string;
  let wrapper: string;
  beforeAll(async () => {
    execFileSync('ip', ['netns', 'add', NS]);
    const inNs = (...args: string[]) => execFileSync('ip', ['netns', 'exec', NS, ...args]);
    inNs('ip', 'link', 'add', 'sw0', 'type', 'veth', 'peer', 'name', 'nic0');
    inNs('ip', 'link', 'add', 'sw1', 'type', 'veth', 'peer', 'name', 'nic1');
    for (const l of ['sw0', 'nic0', 'sw1', 'nic1']) inNs('ip', 'link', 'set', l, 'up');
    dir = await mkdtemp(join(tmpdir(), 'ina-lldp-'));
    wrapper = join(dir, 'tcpdump');
    await writeFile(wrapper, `#!/bin/sh\nexec ip netns exec ${NS} tcpdump "$@"\n`);
    await chmod(wrapper, 0o755);
  });
  afterAll(async () => {
    execFileSync('ip', ['netns', 'del', NS]);
    await rm(dir, { recursive: true, force: true });
  });

  /** Sends the frame out of `iface` every 100 ms until stopped (tcpdump needs a moment to start). */
  function sender(iface: string, frame: Buffer) {
    const py =
      'import socket,sys,time\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind((sys.argv[1],0))\nwhile True:\n  s.send(bytes.fromhex(sys.argv[2])); time.sleep(0.1)';
    return spawn('ip', ['netns', 'exec', NS, 'python3', '-c', py, iface, frame.toString('hex')], { stdio: 'ignore' });
  }

  it('takes the first frame per interface; a silent interface gets [] when the window closes', async () => {
    const f0 = switchFrame({ src: '00:1c:73:aa:bb:01', port: 'Ethernet12', system: 'leaf-a1.dc1', vlan: 100 });
    const s0 = sender('sw0', f0);
    try {
      const t0 = Date.now();
      // a generous window: on a loaded 2-core machine tcpdump and the sender take seconds to start
      const got = await captureLldp(['nic0', 'nic1'], { timeoutS: 8, tcpdump: wrapper });
      expect(got.frames.nic0).toEqual(parseLldpFrame(f0));
      expect(got.frames.nic1).toEqual([]);
      expect(got.errors).toEqual({});
      expect(Date.now() - t0).toBeGreaterThanOrEqual(7900);
    } finally {
      s0.kill();
    }
  });

  it('reports an interface tcpdump cannot open apart, and keeps the frames of the others', async () => {
    const f0 = switchFrame({ src: '00:1c:73:aa:bb:01', port: 'Ethernet12', system: 'leaf-a1.dc1', vlan: 100 });
    const s0 = sender('sw0', f0);
    try {
      const got = await captureLldp(['nic0', 'nosuch0'], { timeoutS: 8, tcpdump: wrapper });
      expect(got.frames).toEqual({ nic0: parseLldpFrame(f0) });
      expect(Object.keys(got.errors)).toEqual(['nosuch0']);
      expect(got.errors.nosuch0).toMatch(/^tcpdump on nosuch0 exited with 1: .*No such device/);
    } finally {
      s0.kill();
    }
    const absent = await captureLldp(['nic0'], { timeoutS: 1, tcpdump: join(dir, 'absent') });
    expect(absent.frames).toEqual({});
    expect(absent.errors.nic0).toMatch(/cannot run tcpdump/);
  });
});
