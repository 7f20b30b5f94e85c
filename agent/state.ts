// What the agent knows about itself at run time, shared by the API, the conductor link and the
// console. It changes through `update`, which tells listeners (the console redraws on it).
import { EventEmitter } from 'node:events';
import { isObject } from './parse.ts';

export interface HeartbeatInfo {
  at: number;
  ok: boolean;
  status: string;
}

/** The node as the conductor's lookup returned it (only the parts the agent reads are typed). */
export interface NodeInfo {
  uuid: string;
  properties: Record<string, unknown>;
  instance_info: Record<string, unknown>;
  driver_internal_info: Record<string, unknown>;
  [key: string]: unknown;
}

/**
 * The node a step's parameters carry: the conductor's current view of it, which the agent keeps (lookup's may
 * be older or sanitised; skip lists and root device hints are read from it). Undefined when it names no node.
 */
export function nodeFromParams(node: Record<string, unknown> | undefined): NodeInfo | undefined {
  if (!node || typeof node.uuid !== 'string') return undefined;
  const obj = (v: unknown): Record<string, unknown> => (isObject(v) ? v : {});
  return {
    ...node,
    uuid: node.uuid,
    properties: obj(node.properties),
    instance_info: obj(node.instance_info),
    driver_internal_info: obj(node.driver_internal_info),
  };
}

/** What the console shows of in-band inspection. */
export interface InspectionStatus {
  phase: 'collecting' | 'posting' | 'done' | 'failed';
  /** One line: CPUs, memory, disks, NICs, vendor. */
  summary?: string;
  /** Time to collect the inventory (excluding LLDP's listening window). */
  collectionMs?: number;
  /** What the callback answered: node UUID, or why it failed. */
  result?: string;
  at: number;
}

/** The previous run's crash, as last-words.ts recorded it in the status file. */
export interface CrashReport {
  /** Epoch seconds. */
  at: number;
  error: string;
  stack: string;
  /** The command that was running, now FAILED. */
  command?: { id: string; name: string };
}

export interface AgentStatus {
  startedAt: number;
  version: string;
  conductorUrl?: string;
  node?: NodeInfo;
  callbackUrl?: string;
  lastHeartbeat?: HeartbeatInfo;
  phase: string;
  /** This run follows a crash of the previous one (its record from the status file). */
  restartedAfter?: CrashReport;
  inspection?: InspectionStatus;
}

export class AgentState extends EventEmitter {
  status: AgentStatus;
  private token: string | null;
  /** Once a GET carried the valid token, GETs must carry it (Ironic 21.4 sends none, newer ones do). */
  getTokenSeen = false;
  /** The conductor's API is 1.96 or later, so it sends the token on GET: required from the first request. */
  conductorSendsGetToken = false;
  /** The auto-TLS key and certificate the API serves (or, before the first lookup, one carried over a crash). */
  autoTls: { key: string; cert: string } | null = null;
  /** The partition UUIDs of the last image written (IPA keeps them for the process lifetime); null before one. */
  lastImageUuids: Record<string, string> | null = null;
  /**
   * `is_root_volume` of each array the software RAID steps last built (`/dev/md<i>` -> true/false; arrays whose
   * logical disk left it unset are absent), which the root device choice obeys. Memory only, as in IPA: an agent
   * that restarts has forgotten it. The next build replaces it and delete_configuration empties it.
   */
  raidRootVolumes: ReadonlyMap<string, boolean> = new Map();

  constructor(version: string, initialToken: string | null) {
    super();
    this.status = { startedAt: Date.now() / 1000, version, phase: 'starting' };
    this.token = initialToken;
  }

  update(patch: Partial<AgentStatus>): void {
    this.status = { ...this.status, ...patch };
    this.emit('change', this.status);
  }

  get agentToken(): string | null {
    return this.token;
  }

  setToken(token: string | null): void {
    this.token = token;
    this.getTokenSeen = false;
  }
}
