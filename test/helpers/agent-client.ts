// Drives an agent the way Ironic's conductor does (ironic/drivers/modules/agent_client.py): POST
// `/v1/commands/?wait=…&agent_token=…` with a compact `{"name","params"}` body (Python json.dumps
// spacing), 60 s timeout, up to 3 attempts on connection errors (adopting the last command when it is
// the same one and RUNNING), `faultstring` read from every error, 409/"agent is busy" as "in
// progress", the last command of the list as the current one, and HTTPS verified against the
// certificate the agent sent in its heartbeat (`agent_verify_ca`), TLS 1.3 minimum by default.
// Unlike the conductor, which waits for the next heartbeat, a busy agent is retried after a pause
// (`busyRetries`). Usable from scripts: no test-framework imports.
//
//   const c = new AgentClient({ url: 'https://192.0.2.5:9999', token, ca: verifyCaPem });
//   const r = await c.command('deploy.execute_deploy_step', params);        // wait=false → RUNNING
//   const last = await c.lastCommand();                                     // what Ironic looks at
//   await c.command('image.install_bootloader', p, { poll: true });         // POST, then poll the list
//   Errors: AgentApiError (status, faultstring), AgentInProgress (409/busy),
//   AgentConnectionFailed, AgentCommandTimeout.
import { Agent as Dispatcher, request } from 'undici';

export interface CommandResult {
  id?: string;
  command_name: string;
  command_status: string;
  command_error: unknown;
  command_result: unknown;
  [key: string]: unknown;
}

export interface AgentClientOptions {
  /** The agent's callback URL (`agent_url`), e.g. `https://192.0.2.5:9999`. */
  url: string;
  token?: string | null;
  /** PEM to verify the agent's certificate against (the heartbeat's `agent_verify_ca`). */
  ca?: string;
  /** `[agent]tls_minimum_version`; Ironic's default is 1.3. */
  tlsMinVersion?: '1.2' | '1.3';
  /** Send the token on GETs too (Ironic after 2026-07; 21.4 sent none). Default true. */
  tokenOnGet?: boolean;
  timeoutMs?: number;
  maxAttempts?: number;
  busyRetries?: number;
  busyDelayMs?: number;
  /** install_bootloader-style polling: `[agent]command_wait_interval` and `command_wait_attempts`. */
  pollIntervalMs?: number;
  pollAttempts?: number;
}

export class AgentApiError extends Error {
  constructor(
    readonly status: number,
    readonly faultstring: string,
  ) {
    super(`Agent API for node returned HTTP status code ${status} with error: ${faultstring}`);
  }
}
/** 409, or a faultstring saying the agent is busy: try again later. */
export class AgentInProgress extends AgentApiError {}
export class AgentConnectionFailed extends Error {}
export class AgentCommandTimeout extends Error {}

/** Python's `json.dumps` default output: `", "` and `": "` separators, non-ASCII escaped. */
export function pythonJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (typeof value === 'object') {
    return `{${Object.entries(value)
      .map(([k, v]) => `${pythonJson(k)}: ${pythonJson(v)}`)
      .join(', ')}}`;
  }
  if (typeof value === 'string') {
    return JSON.stringify(value).replace(
      /[\u007f-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
    );
  }
  return JSON.stringify(value);
}

/** Ironic's `get_command_error`: details, else message, else the whole error; a string as is. */
export function commandErrorText(cmd: Pick<CommandResult, 'command_error'>): string {
  const err = cmd.command_error;
  if (err === null || err === undefined) return 'Invalid agent response';
  if (typeof err === 'string') return err;
  const e = err as { details?: unknown; message?: unknown };
  return String(e.details ?? e.message ?? JSON.stringify(err));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class AgentClient {
  private readonly dispatcher: Dispatcher;
  private readonly o: Required<Omit<AgentClientOptions, 'token' | 'ca'>> & Pick<AgentClientOptions, 'token' | 'ca'>;

  constructor(opts: AgentClientOptions) {
    this.o = {
      tlsMinVersion: '1.3',
      tokenOnGet: true,
      timeoutMs: 60_000,
      maxAttempts: 3,
      busyRetries: 3,
      busyDelayMs: 1000,
      pollIntervalMs: 6000,
      pollAttempts: 100,
      ...opts,
      url: opts.url.replace(/\/+$/, ''),
    };
    this.dispatcher = new Dispatcher({
      headersTimeout: this.o.timeoutMs,
      bodyTimeout: this.o.timeoutMs,
      connect: {
        timeout: this.o.timeoutMs,
        minVersion: `TLSv${this.o.tlsMinVersion}`,
        ...(opts.ca ? { ca: opts.ca } : {}),
      },
    });
  }

  private query(wait?: boolean, withToken = true): string {
    const q: string[] = [];
    if (wait !== undefined) q.push(`wait=${wait}`);
    if (withToken && this.o.token) q.push(`agent_token=${encodeURIComponent(this.o.token)}`);
    return q.length ? `?${q.join('&')}` : '';
  }

  private async send(method: 'GET' | 'POST', query: string, body?: string): Promise<{ status: number; json: unknown }> {
    const res = await request(`${this.o.url}/v1/commands/${query}`, {
      method,
      headers: { 'Content-Type': 'application/json' },
      body,
      dispatcher: this.dispatcher,
    });
    const text = await res.body.text();
    try {
      return { status: res.statusCode, json: JSON.parse(text) };
    } catch {
      throw new AgentApiError(res.statusCode, `Unable to decode response as JSON: ${text.slice(0, 200)}`);
    }
  }

  /** The command list, oldest first (read without checking the status, as Ironic does). */
  async commands(): Promise<CommandResult[]> {
    let lastError: unknown;
    for (let i = 0; i < this.o.maxAttempts; i++) {
      try {
        const { json } = await this.send('GET', this.query(undefined, this.o.tokenOnGet));
        const list = (json as { commands?: unknown }).commands;
        if (!Array.isArray(list))
          throw new AgentApiError(200, `no "commands" list in ${JSON.stringify(json).slice(0, 200)}`);
        return list as CommandResult[];
      } catch (err) {
        if (err instanceof AgentApiError) throw err;
        lastError = err;
      }
    }
    throw new AgentConnectionFailed(`Connection to agent failed: ${(lastError as Error).message}`);
  }

  /** The conductor's view of "current": the last command in the list. */
  async lastCommand(): Promise<CommandResult | undefined> {
    return (await this.commands()).at(-1);
  }

  /** Sends `extension.command`. `wait` asks for the final result; `poll` waits like install_bootloader. */
  async command(
    name: string,
    params: Record<string, unknown> = {},
    opts: { wait?: boolean; poll?: boolean } = {},
  ): Promise<CommandResult> {
    for (let busy = 0; ; busy++) {
      try {
        const first = await this.post(name, params, opts.wait ?? false);
        return opts.poll ? await this.waitForCommand(name) : first;
      } catch (err) {
        if (!(err instanceof AgentInProgress) || busy >= this.o.busyRetries) throw err;
        await sleep(this.o.busyDelayMs);
      }
    }
  }

  private async post(name: string, params: Record<string, unknown>, wait: boolean): Promise<CommandResult> {
    const short = name.slice(name.indexOf('.') + 1);
    const body = pythonJson({ name, params });
    let lastError: unknown;
    for (let i = 0; i < this.o.maxAttempts; i++) {
      let reply: Awaited<ReturnType<typeof this.send>>;
      try {
        reply = await this.send('POST', this.query(wait), body);
      } catch (err) {
        if (err instanceof AgentApiError) throw err;
        lastError = err;
        const last = await this.lastCommand().catch(() => undefined);
        if (last?.command_name === short && last.command_status === 'RUNNING') return last;
        continue;
      }
      const json = reply.json as Partial<CommandResult> & { faultstring?: unknown };
      if (reply.status >= 400) {
        const fault = String(json.faultstring);
        if (reply.status === 409 || fault.toLowerCase().includes('agent is busy'))
          throw new AgentInProgress(reply.status, fault);
        throw new AgentApiError(reply.status, fault);
      }
      const cmdError = json.command_error as { type?: unknown } | null | undefined;
      if (cmdError && cmdError.type === 'TypeError') throw new AgentApiError(reply.status, String(json.faultstring));
      return json as CommandResult;
    }
    throw new AgentConnectionFailed(
      `Connection to agent failed: Failed to connect to the agent for invoking command ${name}. Error: ${(lastError as Error).message}`,
    );
  }

  /** Polls the list until the last entry named like `name` is no longer RUNNING. */
  async waitForCommand(name: string): Promise<CommandResult> {
    const short = name.slice(name.indexOf('.') + 1);
    for (let i = 0; i < this.o.pollAttempts; i++) {
      const entry = (await this.commands()).filter((c) => c.command_name === short).at(-1);
      if (entry && entry.command_status !== 'RUNNING') {
        const e = entry.command_error as { type?: unknown } | null;
        if (e && e.type === 'TypeError') throw new AgentApiError(200, commandErrorText(entry));
        return entry;
      }
      await sleep(this.o.pollIntervalMs);
    }
    throw new AgentCommandTimeout(`command ${name} still running after ${this.o.pollAttempts} polls`);
  }

  close(): Promise<void> {
    return this.dispatcher.close();
  }
}
