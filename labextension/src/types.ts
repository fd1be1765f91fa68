/**
 * Shapes of the `/api/sandbox/*` answers (docs/dev/contract.md §6 and §7).
 *
 * Only the fields the extension reads are typed; the server may send more.
 */

/** One pre-flight check of a plan. */
export interface IPlanCheck {
  label: string;
  ok: boolean;
}

/** One code-scan warning of a plan. */
export interface IPlanWarning {
  severity: 'high' | 'medium' | 'low';
  label: string;
  detail: string;
}

/** What would run, and whether it may. */
export interface IPlan {
  plan_id: string;
  goal: string;
  source: string;
  language: string;
  command: string[];
  backend: string;
  timeout_sec: number;
  network: boolean;
  checks: IPlanCheck[];
  warnings: IPlanWarning[];
  blocked: boolean;
  blocked_reason?: string | null;
  requires_approval: boolean;
  digest: string;
  created_at: string | number;
  code: string;
  file?: string | null;
  /** The identity that made the plan; null under a shared (token) login. */
  owner?: string | null;
  /** The files and folders handed to the run (`inputs`), as the digest binds them. */
  inputs?: IRunInput[];
  /** The session whose kernel runs this cell (the digest binds it); null for a single run. */
  session: string | null;
}

/** A file or folder handed to a run, as its plan lists it (rest-api.yml `RunInput`). */
export interface IRunInput {
  /** Its name in the run's folder (`./NAME`). */
  name: string;
  kind: 'file' | 'dir';
  /** Bytes (a folder: of all its files). */
  size: number;
  sha256: string;
  /** Regular files (1 for a file). */
  files?: number;
}

/** A file the run left under `out/` and handed back (rest-api.yml `RunFile`). */
export interface IRunFile {
  /** Relative to `out/`, `/` between folders. */
  name: string;
  size: number;
  sha256: string;
}

/** One of the caller's sessions (rest-api.yml `Session`): a kernel that keeps state. */
export interface ISession {
  name: string;
  owner: string | null;
  state: 'idle' | 'busy';
  /** Seconds since the epoch. */
  started_at: number;
  /** Seconds since the epoch. */
  last_used: number;
  cells: number;
  network: boolean;
  memory_mb: number | null;
  isolation: string[];
}

/** An approved plan whose run is under way (`GET plans`, `running`): Stop ends it. */
export interface IRunningPlan {
  plan: IPlan;
  /** Stop it with `DELETE runs/{run_id}`. */
  run_id: string;
  state: 'running' | 'stopping';
  started_at: number;
  /** `user` (a person approved it) or `agent` (an agent in auto mode). */
  approved_by: string;
}

/** The answer of `GET /api/sandbox/plans`. */
export interface IPlanListing {
  /** Plans waiting for someone's decision. */
  plans: IPlan[];
  /** Approved plans whose run is under way (no longer waiting for anyone). */
  running: IRunningPlan[];
}

/**
 * A plan request: a snippet, or a file under the server's root; `inputs` are paths
 * under the server's root handed to the run read-only (the digest binds them).
 */
export type PlanRequest = (
  | { language: string; code: string; source: string }
  | { file: string; source: string }
) & { timeout_sec?: number; inputs?: string[] };

/** The answer of `POST /api/sandbox/approve`. */
export interface IApproval {
  approval_token: string;
  plan_id: string;
  expires_in: number;
}

/**
 * A run request: the approval token alone. The server runs the plan it approved,
 * so nothing of the plan is sent back (rest-api.yml's short form of RunRequest).
 */
export interface IRunRequest {
  approval_token: string;
  session_id?: string;
  /** The caller's name for the run (`run_` + 16 hex), to stop it with `DELETE runs/{run_id}`. */
  run_id?: string;
}

/**
 * One display output of a run: a Jupyter MIME bundle (`display_data`) the server
 * checked against its allowlist and caps. Untrusted: it is rendered as untrusted output.
 */
export interface IDisplayOutput {
  output_type: 'display_data';
  /** MIME type to value: base64 text for images, any JSON for `application/json`. */
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  /** Characters (code points) of the run's stdout written before this output. */
  stdout_at: number;
}

/** The result envelope every backend answers. */
export interface IRunResult {
  backend: string;
  language: string;
  command: string[];
  exit_code: number;
  stdout: string;
  stderr: string;
  duration_ms: number;
  truncated: boolean;
  timed_out: boolean;
  /** Someone stopped the run before it ended (Stop, a closed stream). */
  cancelled?: boolean;
  sandbox_id: string | null;
  run_id: string;
  plan_id: string | null;
  isolation: string[];
  /** The run used a sandbox of the warm pool (same isolation as a cold start). */
  warm?: boolean;
  /** Its display outputs (figures, HTML, images...), in order; absent on older servers. */
  outputs?: IDisplayOutput[];
  /** What differed from what was asked (a dropped display output...), one sentence each. */
  notes?: string[];
  /** The files it left under `out/`, handed back; their bytes by `runFile`. */
  files?: IRunFile[];
}

/** The persisted settings, masked: the token is never sent back, only `has_token`. */
export interface IMaskedSettings {
  backend: string;
  matrixlab_url: string;
  matrixlab_image: string;
  allow_network: boolean;
  timeout_sec: number;
  has_token: boolean;
}

/** A subset of settings to save; `matrixlab_token: ""` clears the token. */
export type SettingsUpdate = Partial<
  Omit<IMaskedSettings, 'has_token'> & { matrixlab_token: string }
>;

/** The answer of `GET /api/sandbox/status`. */
export interface IStatus {
  backend: string | null;
  ok: boolean;
  error: string | null;
  env_override: string | null;
  settings: IMaskedSettings;
  has_token: boolean;
  require_approval: boolean;
  /** The longest timeout the server takes, in seconds (the shortest is 1). */
  max_timeout_sec?: number;
  isolation: string[];
  remote?: unknown;
  settings_error?: string | null;
  /** How many plans `GET plans` lists (waiting for someone else's decision). */
  waiting_plans?: number;
  /** The backends the administrator allows (`off` is not, by default). */
  allowed_backends?: string[];
  version?: string;
}

/** The answer of `POST /api/sandbox/matrixlab/test`. */
export interface IConnectionReport {
  ok: boolean;
  url?: string;
  reachable?: boolean;
  latency_ms?: number | null;
  version?: string | null;
  docker_ok?: boolean | null;
  hint?: string | null;
  error?: string | null;
  [key: string]: unknown;
}

/** The answer of `GET /api/sandbox/matrixlab/lifecycle`. */
export interface ILifecycleStatus {
  installed: boolean;
  running: boolean;
  docker_available: boolean;
  lifecycle_enabled: boolean;
  url?: string;
  instructions?: unknown;
  [key: string]: unknown;
}

/** One docker step of a lifecycle action. */
export interface ILifecycleStep {
  cmd: string;
  exit_code: number;
  stdout: string;
  stderr: string;
  duration_ms: number;
}

/** The answer of `POST /api/sandbox/matrixlab/{install,start,stop}`. */
export interface ILifecycleResult {
  ok?: boolean;
  steps: ILifecycleStep[];
  [key: string]: unknown;
}

/** A lifecycle action. */
export type LifecycleAction = 'install' | 'start' | 'stop';

/** One line of a streamed run. */
export type StreamLine =
  | { type: 'stdout' | 'stderr'; data: string }
  | { type: 'display'; data: IDisplayOutput }
  | ({ type: 'result' } & IRunResult)
  | { type: 'error'; message: string; reason?: string; code?: string };
