// The `baremetal` CLI (python3-ironicclient) against one Ironic, plus a REST read of a node for polling
// (a CLI call costs about a second of Python start-up; polling through it would dominate the suite).
import { execa } from 'execa';
import type { RunningIronic } from './ironic.ts';

export interface NodeView {
  uuid: string;
  provision_state: string;
  target_provision_state: string | null;
  last_error: string | null;
  driver_internal_info: Record<string, unknown>;
  instance_info: Record<string, unknown>;
}

export class Baremetal {
  constructor(private readonly ironic: RunningIronic) {}

  /** Runs `baremetal <args>`; a non-zero exit throws with the CLI's own error text. */
  async run(args: readonly string[]): Promise<string> {
    const [cmd, ...pre] = this.ironic.cli;
    const r = await execa(cmd!, [...pre, ...args], { env: this.ironic.cliEnv, reject: false });
    if (r.exitCode !== 0)
      throw new Error(`baremetal ${args.join(' ')} failed (exit ${r.exitCode}): ${r.stderr.trim()}`);
    return r.stdout;
  }

  async node(ident: string): Promise<NodeView> {
    const res = await fetch(`${this.ironic.url}/v1/nodes/${ident}`, {
      headers: { 'X-OpenStack-Ironic-API-Version': this.ironic.apiVersion },
    });
    if (res.status !== 200) throw new Error(`GET /v1/nodes/${ident}: HTTP ${res.status} ${await res.text()}`);
    return (await res.json()) as NodeView;
  }
}
