/**
 * The request layer: every call the extension makes goes to `/api/sandbox/*` through here.
 *
 * It has no runtime dependency on JupyterLab: the caller gives it a `send` function
 * (in the lab, `ServerConnection.makeRequest` with the server settings, which adds the
 * token and XSRF headers), so it is unit-tested with plain `Response` objects.
 */

import type {
  IApproval,
  IConnectionReport,
  IDisplayOutput,
  ILifecycleResult,
  ILifecycleStatus,
  IMaskedSettings,
  IPlan,
  IPlanListing,
  IRunRequest,
  IRunResult,
  ISession,
  IStatus,
  LifecycleAction,
  PlanRequest,
  SettingsUpdate,
  StreamLine
} from './types';

/** Sends one HTTP request (authenticated by the caller) and answers the raw response. */
export type SendFunction = (
  url: string,
  init: RequestInit
) => Promise<Response>;

/** The media type of a streamed run. */
export const NDJSON = 'application/x-ndjson';

/**
 * A non-2xx answer of the sandbox API, carrying the server's human message.
 *
 * `message` is what the user sees: the `message` of the JSON error body
 * (`{message, reason, code}`), never the raw JSON.
 */
export class ResponseError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string = 'http_error',
    readonly reason: string = ''
  ) {
    super(message);
    this.name = 'ResponseError';
  }
}

/** Turn an error answer's body into a `ResponseError` with the server's message. */
export function errorFromBody(
  status: number,
  statusText: string,
  body: string
): ResponseError {
  const fallback = `${status} ${statusText || 'error'}`.trim();
  let data: unknown = null;
  try {
    data = JSON.parse(body);
  } catch {
    // Not JSON (a proxy's HTML page, an empty body): say only the status.
  }
  if (data && typeof data === 'object') {
    const { message, reason, code } = data as Record<string, unknown>;
    const text = typeof message === 'string' && message ? message : fallback;
    return new ResponseError(
      text,
      status,
      typeof code === 'string' ? code : 'http_error',
      typeof reason === 'string' ? reason : statusText
    );
  }
  return new ResponseError(fallback, status, 'http_error', statusText);
}

/** Yield the JSON objects of an NDJSON body as its lines arrive. */
export async function* readNdjson(
  body: ReadableStream<Uint8Array>
): AsyncGenerator<unknown> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line) {
        yield JSON.parse(line);
      }
      newline = buffer.indexOf('\n');
    }
    if (done) {
      break;
    }
  }
  if (buffer.trim()) {
    yield JSON.parse(buffer);
  }
}

/** Receives output while a run streams it. */
export type OutputCallback = (
  stream: 'stdout' | 'stderr',
  text: string
) => void;

/** Receives a run's display outputs (figures, HTML...) in order with its text. */
export type DisplayCallback = (item: IDisplayOutput) => void;

/** A typed client of the sandbox REST API. */
export class SandboxClient {
  /**
   * @param baseUrl the Jupyter server's base URL (ends with `/`)
   * @param send sends one authenticated request
   */
  constructor(
    readonly baseUrl: string,
    private readonly send: SendFunction
  ) {}

  /** The URL of an endpoint under `/api/sandbox/`. */
  url(endpoint: string): string {
    const base = this.baseUrl.endsWith('/') ? this.baseUrl : `${this.baseUrl}/`;
    return `${base}api/sandbox/${endpoint}`;
  }

  /** Send a request; answer the parsed JSON body or throw a `ResponseError`. */
  async requestJSON<T>(endpoint: string, init: RequestInit = {}): Promise<T> {
    const response = await this.send(this.url(endpoint), init);
    const text = await response.text();
    if (!response.ok) {
      throw errorFromBody(response.status, response.statusText, text);
    }
    return (text ? JSON.parse(text) : {}) as T;
  }

  private post<T>(endpoint: string, body: unknown): Promise<T> {
    return this.requestJSON<T>(endpoint, {
      method: 'POST',
      body: JSON.stringify(body),
      headers: { 'Content-Type': 'application/json' }
    });
  }

  /** `GET status`: live backend, health, masked settings. */
  status(): Promise<IStatus> {
    return this.requestJSON<IStatus>('status');
  }

  /** `GET config`: the masked settings. */
  config(): Promise<IMaskedSettings> {
    return this.requestJSON<IMaskedSettings>('config');
  }

  /**
   * `PUT config`: save a subset of settings; answers the new status.
   *
   * `confirmed`: the user said yes to switching to Pass-through (`confirmPassThrough`);
   * the server refuses that switch without it (`confirmation_required`).
   */
  configure(changes: SettingsUpdate, confirmed = false): Promise<IStatus> {
    return this.requestJSON<IStatus>('config', {
      method: 'PUT',
      body: JSON.stringify(confirmed ? { ...changes, confirm: true } : changes),
      headers: { 'Content-Type': 'application/json' }
    });
  }

  /** `POST plan`: what would run, and whether it may. */
  async plan(request: PlanRequest): Promise<IPlan> {
    const answer = await this.post<{ plan: IPlan }>('plan', request);
    return answer.plan;
  }

  /** `GET plans`: the plans waiting for approval, oldest first (e.g. an agent's in `ask` mode). */
  async plans(): Promise<IPlan[]> {
    return (await this.planListing()).plans;
  }

  /**
   * `GET plans` in full: the plans waiting for a decision, and the approved ones whose
   * run is under way (each with the run id that `cancelRun` stops).
   */
  async planListing(): Promise<IPlanListing> {
    const answer = await this.requestJSON<Partial<IPlanListing>>('plans');
    return {
      plans: Array.isArray(answer.plans) ? answer.plans : [],
      running: Array.isArray(answer.running) ? answer.running : []
    };
  }

  /** `POST approve`: a single-use token for a pending plan. */
  approve(planId: string): Promise<IApproval> {
    return this.post<IApproval>('approve', { plan_id: planId });
  }

  /** `POST reject`: drop a pending plan the user declined, so it can never be approved. */
  reject(planId: string): Promise<{ plan_id: string; rejected: boolean }> {
    return this.post('reject', { plan_id: planId });
  }

  /**
   * `POST run` with `Accept: application/x-ndjson`: output goes to `onOutput` as it is
   * produced, display outputs to `onDisplay` between it; answers the result envelope.
   * Aborting `signal` closes the stream, which stops the run on the server too.
   */
  async run(
    request: IRunRequest,
    onOutput: OutputCallback,
    signal?: AbortSignal,
    onDisplay?: DisplayCallback
  ): Promise<IRunResult> {
    const response = await this.send(this.url('run'), {
      method: 'POST',
      body: JSON.stringify(request),
      headers: { 'Content-Type': 'application/json', Accept: NDJSON },
      ...(signal ? { signal } : {})
    });
    if (!response.ok) {
      throw errorFromBody(
        response.status,
        response.statusText,
        await response.text()
      );
    }
    const type = response.headers.get('Content-Type') ?? '';
    if (!type.includes(NDJSON) || !response.body) {
      // A server that does not stream answers one envelope: show its output all at once.
      const result = JSON.parse(await response.text()) as IRunResult;
      emitAll(result, onOutput, onDisplay);
      return result;
    }
    for await (const item of readNdjson(response.body)) {
      const line = item as StreamLine;
      if (line.type === 'stdout' || line.type === 'stderr') {
        onOutput(line.type, line.data);
      } else if (line.type === 'display') {
        onDisplay?.(line.data);
      } else if (line.type === 'error') {
        throw new ResponseError(line.message, 200, line.code, line.reason);
      } else if (line.type === 'result') {
        // eslint-disable-next-line @typescript-eslint/no-unused-vars
        const { type: _type, ...result } = line;
        return result;
      }
    }
    throw new ResponseError(
      'the run stream ended without a result',
      200,
      'stream_ended'
    );
  }

  /** `DELETE runs/{run_id}`: stop a run under way; its envelope then says `cancelled`. */
  cancelRun(runId: string): Promise<{ run_id: string; cancelled: boolean }> {
    return this.requestJSON(`runs/${encodeURIComponent(runId)}`, {
      method: 'DELETE'
    });
  }

  /**
   * The URL of `GET runs/{run_id}/files/{name}`: a file the run left under `out/`
   * (for the run's owner only). A name in a sub-folder keeps its `/`.
   */
  runFileUrl(runId: string, name: string): string {
    const path = name.split('/').map(encodeURIComponent).join('/');
    return this.url(`runs/${encodeURIComponent(runId)}/files/${path}`);
  }

  /**
   * The bytes of a file the run handed back from `out/`. A file the server no longer
   * keeps (expired, or another identity's) is a `ResponseError` of status 404
   * (`run_file_not_found`).
   */
  async runFile(runId: string, name: string): Promise<Blob> {
    const response = await this.send(this.runFileUrl(runId, name), {
      method: 'GET'
    });
    if (!response.ok) {
      throw errorFromBody(
        response.status,
        response.statusText,
        await response.text()
      );
    }
    return response.blob();
  }

  /** `GET sessions`: the caller's sessions, oldest first. */
  async sessions(): Promise<ISession[]> {
    const answer = await this.requestJSON<{ sessions?: ISession[] }>(
      'sessions'
    );
    return Array.isArray(answer.sessions) ? answer.sessions : [];
  }

  /** `POST sessions/{name}/restart`: the session afresh (its state is gone). */
  restartSession(name: string): Promise<ISession> {
    return this.post<ISession>(
      `sessions/${encodeURIComponent(name)}/restart`,
      {}
    );
  }

  /** `DELETE sessions/{name}`: stop the session (its processes and folder go). */
  stopSession(name: string): Promise<{ name: string; stopped: boolean }> {
    return this.requestJSON(`sessions/${encodeURIComponent(name)}`, {
      method: 'DELETE'
    });
  }

  /** `POST matrixlab/test`, optionally with an unsaved URL and token. */
  testConnection(options: {
    matrixlab_url?: string;
    matrixlab_token?: string;
  }): Promise<IConnectionReport> {
    return this.post<IConnectionReport>('matrixlab/test', options);
  }

  /** `GET matrixlab/lifecycle`: pure inspection. */
  lifecycle(): Promise<ILifecycleStatus> {
    return this.requestJSON<ILifecycleStatus>('matrixlab/lifecycle');
  }

  /** `POST matrixlab/{install,start,stop}`: the answer lists each docker step. */
  lifecycleAction(action: LifecycleAction): Promise<ILifecycleResult> {
    return this.post<ILifecycleResult>(`matrixlab/${action}`, {});
  }
}

/** A fresh run id (`run_` + 16 hex digits), so the caller can stop the run by name. */
export function newRunId(): string {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return (
    'run_' +
    Array.from(bytes, byte => byte.toString(16).padStart(2, '0')).join('')
  );
}

/**
 * Show a whole envelope as a stream would have: stdout cut where each display output
 * came (`stdout_at` counts code points, as the server does), then stderr.
 */
export function emitAll(
  result: IRunResult,
  onOutput: OutputCallback,
  onDisplay?: DisplayCallback
): void {
  const outputs = onDisplay ? (result.outputs ?? []) : [];
  let stdout = result.stdout;
  if (outputs.length) {
    const chars = Array.from(stdout);
    let at = 0;
    for (const item of outputs) {
      const cut = Math.min(Math.max(at, item.stdout_at || 0), chars.length);
      if (cut > at) {
        onOutput('stdout', chars.slice(at, cut).join(''));
      }
      at = cut;
      onDisplay?.(item);
    }
    stdout = chars.slice(at).join('');
  }
  if (stdout) {
    onOutput('stdout', stdout);
  }
  if (result.stderr) {
    onOutput('stderr', result.stderr);
  }
}
