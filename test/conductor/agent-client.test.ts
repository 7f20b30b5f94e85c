// The Ironic-like agent client against canned agent replies (conductor.md §5.1 fixtures).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentApiError,
  AgentClient,
  AgentConnectionFailed,
  AgentInProgress,
  commandErrorText,
} from '../helpers/agent-client.ts';

interface Seen {
  method: string;
  url: string;
  body: string;
}
type Reply = { status: number; body: string } | 'drop';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** An HTTP "agent" answering POSTs and GETs from two scripts (the last entry repeats). */
async function cannedAgent(posts: Reply[], gets: Reply[] = [{ status: 200, body: '{"commands": []}' }]) {
  const seen: Seen[] = [];
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    for await (const c of req) body += c;
    seen.push({ method: req.method!, url: req.url!, body });
    const script = req.method === 'POST' ? posts : gets;
    const reply = script.length > 1 ? script.shift()! : script[0]!;
    if (reply === 'drop') return void req.socket.destroy();
    res.writeHead(reply.status, { 'Content-Type': 'application/json' }).end(reply.body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const clients: AgentClient[] = [];
  cleanups.push(async () => {
    await Promise.all(clients.map((c) => c.close()));
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  const client = (token: string | null = 'magical', extra = {}) => {
    const c = new AgentClient({ url, token, busyRetries: 0, pollIntervalMs: 10, ...extra });
    clients.push(c);
    return c;
  };
  return { seen, client };
}

const ok = (body: unknown, status = 200): Reply => ({ status, body: JSON.stringify(body) });

describe('agent client (Ironic agent_client behaviour)', () => {
  it('POSTs the compact Python-spaced body with wait then agent_token, and returns the reply as is', async () => {
    const { seen, client } = await cannedAgent([ok({ status: 'ok' })]);
    expect(await client().command('standby.run_image', { image_info: { image_id: 'test_image' } })).toEqual({
      status: 'ok',
    });
    expect(seen[0]).toEqual({
      method: 'POST',
      url: '/v1/commands/?wait=false&agent_token=magical',
      body: '{"name": "standby.run_image", "params": {"image_info": {"image_id": "test_image"}}}',
    });
  });

  it('sends no token when it has none, and wait=true for sync commands', async () => {
    const { seen, client } = await cannedAgent([ok({ command_status: 'SUCCEEDED' })]);
    await client(null).command('clean.get_clean_steps', { node: {}, ports: [] }, { wait: true });
    expect(seen[0]!.url).toBe('/v1/commands/?wait=true');
  });

  it.each([
    [{ status: 200, body: 'this be not json matey!' }, AgentApiError, /Unable to decode response as JSON/],
    [ok({ faultstring: 'you dun goofd' }, 400), AgentApiError, /you dun goofd/],
    [ok({ faultstring: 'you dun goofd', command_error: { type: 'TypeError' } }), AgentApiError, /you dun goofd/],
    [ok({ faultstring: 'Agent is busy - meowing' }, 400), AgentInProgress, /meowing/],
    [ok({ faultstring: 'lolcat says busy meowing' }, 409), AgentInProgress, /lolcat/],
  ] as const)('reply %j → %s', async (reply, type, text) => {
    const { seen, client } = await cannedAgent([reply as Reply]);
    const err = await client()
      .command('standby.run_image')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(type);
    expect((err as Error).message).toMatch(text);
    expect(seen.filter((s) => s.method === 'POST')).toHaveLength(1);
  });

  it('retries a busy agent when asked to', async () => {
    const { seen, client } = await cannedAgent([
      ok({ faultstring: 'Agent is busy' }, 409),
      ok({ command_status: 'RUNNING' }),
    ]);
    expect(await client('magical', { busyRetries: 2, busyDelayMs: 10 }).command('deploy.execute_deploy_step')).toEqual({
      command_status: 'RUNNING',
    });
    expect(seen.filter((s) => s.method === 'POST')).toHaveLength(2);
  });

  it('after a connection error adopts the last command when it is the same one and RUNNING (1 POST)', async () => {
    const { seen, client } = await cannedAgent(
      ['drop'],
      [ok({ commands: [{ command_name: 'bar', command_status: 'RUNNING' }] })],
    );
    expect(await client().command('foo.bar')).toEqual({ command_name: 'bar', command_status: 'RUNNING' });
    expect(seen.filter((s) => s.method === 'POST')).toHaveLength(1);
    expect(seen.find((s) => s.method === 'GET')!.url).toBe('/v1/commands/?agent_token=magical');
  });

  it.each([
    [[]],
    [[{ command_name: 'meow', command_status: 'RUNNING' }]],
    [[{ command_name: 'bar', command_status: 'FINISHED' }]],
  ])('fails after 3 POSTs when the list shows %j', async (commands) => {
    const { seen, client } = await cannedAgent(['drop'], [ok({ commands })]);
    await expect(client().command('foo.bar')).rejects.toBeInstanceOf(AgentConnectionFailed);
    expect(seen.filter((s) => s.method === 'POST')).toHaveLength(3);
  });

  it('polls until the last command of that name is no longer RUNNING', async () => {
    const running = ok({
      commands: [
        {
          command_name: 'run_image',
          command_status: 'RUNNING',
          command_result: 'I did something',
          command_error: null,
        },
      ],
    });
    const done = ok({
      commands: [
        {
          command_name: 'run_image',
          command_status: 'SUCCEEDED',
          command_result: 'I did something',
          command_error: null,
        },
      ],
    });
    const { client } = await cannedAgent([ok({ status: 'ok' })], [running, running, done]);
    const r = await client().command('standby.run_image', {}, { poll: true });
    expect(r.command_status).toBe('SUCCEEDED');
  });

  it('reads the command list and treats its last entry as current', async () => {
    const list = [
      { command_name: 'get_deploy_steps', command_status: 'SUCCEEDED' },
      { command_name: 'execute_deploy_step', command_status: 'RUNNING' },
    ];
    const { client } = await cannedAgent([], [ok({ commands: list })]);
    expect(await client().lastCommand()).toEqual(list[1]);
  });

  it.each([
    [{ command_error: { details: 'd', message: 'm' } }, 'd'],
    [{ command_error: { message: 'm' } }, 'm'],
    [{ command_error: 'bad' }, 'bad'],
    [{ command_error: null }, 'Invalid agent response'],
  ])('command error text of %j is %s', (cmd, want) => {
    expect(commandErrorText(cmd)).toBe(want);
  });
});
