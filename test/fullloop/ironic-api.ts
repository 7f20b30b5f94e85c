// The few Ironic REST calls the full loop makes, and polling on what they change.
export interface IronicNode {
  uuid: string;
  provision_state: string;
  target_provision_state: string | null;
  power_state: string | null;
  last_error: string | null;
  driver_internal_info: Record<string, unknown>;
}

export class IronicApi {
  constructor(readonly url: string) {}

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.url}${path}`, {
      method,
      headers: { 'content-type': 'application/json', 'x-openstack-ironic-api-version': '1.72' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${text}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  node(uuid: string): Promise<IronicNode> {
    return this.call('GET', `/v1/nodes/${uuid}`);
  }

  provision(uuid: string, target: string, extra: Record<string, unknown> = {}): Promise<void> {
    return this.call('PUT', `/v1/nodes/${uuid}/states/provision`, { target, ...extra });
  }

  /** Polls the node until `done` holds; fails at once if it lands in an error state. */
  async waitFor(uuid: string, what: string, done: (n: IronicNode) => boolean, timeoutMs: number): Promise<IronicNode> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const n = await this.node(uuid);
      if (done(n)) return n;
      if (/fail/.test(n.provision_state) || n.provision_state === 'error')
        throw new Error(`${what}: node went to ${n.provision_state}: ${n.last_error}`);
      if (Date.now() > deadline)
        throw new Error(
          `${what}: still ${n.provision_state} -> ${n.target_provision_state} after ${timeoutMs / 1000} s`,
        );
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}
