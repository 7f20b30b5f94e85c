// The few calls of Ironic's REST API the fleet makes (noauth, microversion 1.115): the CLI costs a second of
// Python start-up per call, too much for dozens of nodes polled together.
const VERSION = '1.115';

export interface FleetNode {
  uuid: string;
  name: string;
  provision_state: string;
  target_provision_state: string | null;
  last_error: string | null;
  conductor: string | null;
  reservation: string | null;
  driver_internal_info: Record<string, unknown>;
}

export class IronicRest {
  constructor(readonly url: string) {}

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.url}${path}`, {
      method,
      headers: { 'X-OpenStack-Ironic-API-Version': VERSION, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${text.slice(0, 500)}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  node(ident: string): Promise<FleetNode> {
    return this.call('GET', `/v1/nodes/${ident}`);
  }

  async nodes(): Promise<FleetNode[]> {
    const fields = 'uuid,name,provision_state,target_provision_state,last_error,reservation';
    return (await this.call<{ nodes: FleetNode[] }>('GET', `/v1/nodes?fields=${fields}&limit=1000`)).nodes;
  }

  provision(uuid: string, target: string, extra: Record<string, unknown> = {}): Promise<void> {
    return this.call('PUT', `/v1/nodes/${uuid}/states/provision`, { target, ...extra });
  }

  patch(uuid: string, ops: { op: string; path: string; value?: unknown }[]): Promise<void> {
    return this.call('PATCH', `/v1/nodes/${uuid}`, ops);
  }
}
