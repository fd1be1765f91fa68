/**
 * @jest-environment node
 */
// The request layer against real fetch `Response` objects (Node's), no server mock library.

import {
  errorFromBody,
  NDJSON,
  newRunId,
  readNdjson,
  ResponseError,
  SandboxClient
} from '../src/request';
import type { IDisplayOutput, IRunResult } from '../src/types';
import { result } from './fixtures';

const RESULT: IRunResult = result({
  duration_ms: 12,
  plan_id: 'plan_1',
  isolation: ['tempdir']
});

/** A client whose `send` records requests and answers the given responses in order. */
function clientAnswering(...responses: Response[]) {
  const calls: Array<{ url: string; init: RequestInit }> = [];
  const client = new SandboxClient('/lab-base/', async (url, init) => {
    calls.push({ url, init });
    const next = responses.shift();
    if (!next) {
      throw new Error('no more responses');
    }
    return next;
  });
  return { client, calls };
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

/** A body that arrives in the given chunks, split wherever the test says. */
function chunked(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) {
        controller.enqueue(encoder.encode(chunk));
      }
      controller.close();
    }
  });
}

describe('errorFromBody', () => {
  it('shows the message of a JSON error body, keeping code and reason', () => {
    const error = errorFromBody(
      400,
      'Bad Request',
      JSON.stringify({
        message: "unknown sandbox backend 'x'",
        reason: 'Bad Request',
        code: 'unknown_backend'
      })
    );
    expect(error).toBeInstanceOf(ResponseError);
    expect(error.message).toBe("unknown sandbox backend 'x'");
    expect(error.code).toBe('unknown_backend');
    expect(error.status).toBe(400);
  });

  it('never shows an HTML page or raw text, only the status', () => {
    const error = errorFromBody(
      502,
      'Bad Gateway',
      '<html><body>nginx</body></html>'
    );
    expect(error.message).toBe('502 Bad Gateway');
  });

  it('falls back to the status when the JSON has no message', () => {
    expect(errorFromBody(403, 'Forbidden', '{"code": "x"}').message).toBe(
      '403 Forbidden'
    );
  });
});

describe('SandboxClient', () => {
  it('builds URLs under the base URL', () => {
    expect(new SandboxClient('/base', fetch).url('status')).toBe(
      '/base/api/sandbox/status'
    );
    expect(new SandboxClient('/base/', fetch).url('matrixlab/test')).toBe(
      '/base/api/sandbox/matrixlab/test'
    );
  });

  it('posts a plan as JSON and unwraps the plan', async () => {
    const { client, calls } = clientAnswering(
      json({ plan: { plan_id: 'plan_1', blocked: false } })
    );
    const plan = await client.plan({
      language: 'py',
      code: 'print(2+2)',
      source: 'code_block'
    });
    expect(plan.plan_id).toBe('plan_1');
    expect(calls[0].url).toBe('/lab-base/api/sandbox/plan');
    expect(calls[0].init.method).toBe('POST');
    expect(JSON.parse(String(calls[0].init.body))).toEqual({
      language: 'py',
      code: 'print(2+2)',
      source: 'code_block'
    });
  });

  it('names runs run_ + 16 hex digits, a new name each time', () => {
    const a = newRunId();
    expect(a).toMatch(/^run_[0-9a-f]{16}$/);
    expect(newRunId()).not.toBe(a);
  });

  it('stops a run by name with DELETE runs/{run_id}', async () => {
    const { client, calls } = clientAnswering(
      json({ run_id: 'run_0123456789abcdef', cancelled: true })
    );
    expect(await client.cancelRun('run_0123456789abcdef')).toEqual({
      run_id: 'run_0123456789abcdef',
      cancelled: true
    });
    expect(calls[0].url).toBe(
      '/lab-base/api/sandbox/runs/run_0123456789abcdef'
    );
    expect(calls[0].init.method).toBe('DELETE');
  });

  it('passes the abort signal to the request, so Stop can close the stream', async () => {
    const { client, calls } = clientAnswering(json(RESULT));
    const controller = new AbortController();
    await client.run(
      { approval_token: 't', run_id: 'run_1' },
      () => undefined,
      controller.signal
    );
    expect(calls[0].init.signal).toBe(controller.signal);
    expect(JSON.parse(String(calls[0].init.body)).run_id).toBe('run_1');
  });

  it('rejects a declined plan by id', async () => {
    const { client, calls } = clientAnswering(
      json({ plan_id: 'plan_1', rejected: true })
    );
    expect(await client.reject('plan_1')).toEqual({
      plan_id: 'plan_1',
      rejected: true
    });
    expect(calls[0].url).toBe('/lab-base/api/sandbox/reject');
    expect(JSON.parse(String(calls[0].init.body))).toEqual({
      plan_id: 'plan_1'
    });
  });

  it('throws a ResponseError with the server message on an error answer', async () => {
    const { client } = clientAnswering(
      json(
        {
          message: 'plan plan_x is not pending',
          reason: 'Not Found',
          code: 'plan_not_found'
        },
        404
      )
    );
    await expect(client.approve('plan_x')).rejects.toMatchObject({
      message: 'plan plan_x is not pending',
      status: 404,
      code: 'plan_not_found'
    });
  });

  it('sends a config change with PUT, the token only when given', async () => {
    const { client, calls } = clientAnswering(
      json({ backend: 'matrixlab', ok: false })
    );
    await client.configure({ backend: 'matrixlab' });
    expect(calls[0].init.method).toBe('PUT');
    expect(JSON.parse(String(calls[0].init.body))).toEqual({
      backend: 'matrixlab'
    });
  });

  it('says confirm only for a switch the user confirmed', async () => {
    const { client, calls } = clientAnswering(
      json({ backend: 'off', ok: true }),
      json(
        {
          message:
            'Switch the sandbox backend to off? ... send "confirm": true',
          reason: 'Conflict',
          code: 'confirmation_required'
        },
        409
      )
    );
    await client.configure({ backend: 'off' }, true);
    expect(JSON.parse(String(calls[0].init.body))).toEqual({
      backend: 'off',
      confirm: true
    });
    // Unconfirmed, the server refuses; the error carries its stable code.
    await expect(client.configure({ backend: 'off' })).rejects.toMatchObject({
      status: 409,
      code: 'confirmation_required'
    });
    expect(JSON.parse(String(calls[1].init.body))).toEqual({ backend: 'off' });
  });

  it('streams NDJSON output in order and answers the result envelope', async () => {
    const lines = [
      { type: 'stdout', data: 'hello ' },
      { type: 'stderr', data: 'warn\n' },
      { type: 'stdout', data: 'world\n' },
      { type: 'result', ...RESULT }
    ].map(line => JSON.stringify(line) + '\n');
    // Split mid-line and mid-character to prove the reader buffers correctly.
    const text = lines.join('') + '';
    const cut1 = 7;
    const cut2 = lines[0].length + 3;
    const body = chunked([
      text.slice(0, cut1),
      text.slice(cut1, cut2),
      text.slice(cut2)
    ]);
    const { client, calls } = clientAnswering(
      new Response(body, { status: 200, headers: { 'Content-Type': NDJSON } })
    );
    const seen: string[] = [];
    const result = await client.run({ approval_token: 't' }, (stream, data) =>
      seen.push(`${stream}:${data}`)
    );
    expect(seen).toEqual(['stdout:hello ', 'stderr:warn\n', 'stdout:world\n']);
    expect(result.exit_code).toBe(0);
    expect(result).not.toHaveProperty('type');
    expect((calls[0].init.headers as Record<string, string>).Accept).toBe(
      NDJSON
    );
    // The token alone crosses the wire: the server runs the plan it approved.
    expect(JSON.parse(String(calls[0].init.body))).toEqual({
      approval_token: 't'
    });
  });

  it('turns an error line in the stream into a ResponseError', async () => {
    const body = chunked([
      JSON.stringify({ type: 'stdout', data: 'partial' }) + '\n',
      JSON.stringify({
        type: 'error',
        message: 'Runner unreachable',
        code: 'backend_unreachable'
      }) + '\n'
    ]);
    const { client } = clientAnswering(
      new Response(body, { status: 200, headers: { 'Content-Type': NDJSON } })
    );
    const seen: string[] = [];
    await expect(
      client.run({ approval_token: 'tok' }, (_s, d) => seen.push(d))
    ).rejects.toMatchObject({
      message: 'Runner unreachable',
      code: 'backend_unreachable'
    });
    expect(seen).toEqual(['partial']);
  });

  it('says so when a stream ends without a result', async () => {
    const { client } = clientAnswering(
      new Response(chunked(['{"type":"stdout","data":"a"}\n']), {
        status: 200,
        headers: { 'Content-Type': NDJSON }
      })
    );
    await expect(
      client.run({ approval_token: 'tok' }, () => undefined)
    ).rejects.toThrow('ended without a result');
  });

  it('accepts a non-streamed envelope and still delivers its output', async () => {
    const { client } = clientAnswering(json({ ...RESULT, stderr: 'oops' }));
    const seen: string[] = [];
    const result = await client.run({ approval_token: 'tok' }, (stream, data) =>
      seen.push(`${stream}:${data}`)
    );
    expect(seen).toEqual(['stdout:4\n', 'stderr:oops']);
    expect(result.run_id).toBe('run_1');
  });

  it('refuses a run with the 403 message before any stream', async () => {
    const { client } = clientAnswering(
      json(
        {
          message: 'this run needs an approval token',
          reason: 'Forbidden',
          code: 'approval_required'
        },
        403
      )
    );
    await expect(
      client.run({ approval_token: 'tok' }, () => undefined)
    ).rejects.toMatchObject({ status: 403, code: 'approval_required' });
  });
});

describe('readNdjson', () => {
  it('keeps a multi-byte character split across chunks intact', async () => {
    const bytes = new TextEncoder().encode('{"type":"stdout","data":"é✓"}\n');
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(bytes.slice(0, 27));
        controller.enqueue(bytes.slice(27));
        controller.close();
      }
    });
    const items: unknown[] = [];
    for await (const item of readNdjson(body)) {
      items.push(item);
    }
    expect(items).toEqual([{ type: 'stdout', data: 'é✓' }]);
  });
});

/** A display output the server kept, after `stdout_at` characters of stdout. */
function display(
  data: Record<string, unknown>,
  stdout_at: number
): IDisplayOutput {
  return { output_type: 'display_data', data, metadata: {}, stdout_at };
}

describe('SandboxClient.run with display outputs', () => {
  it('hands each display line to onDisplay, in order with the text', async () => {
    const figure = display({ 'image/png': 'iVBORw0KGgo=' }, 2);
    const lines = [
      { type: 'stdout', data: 'a\n' },
      { type: 'display', data: figure },
      { type: 'stdout', data: 'b\n' },
      { type: 'result', ...RESULT, stdout: 'a\nb\n', outputs: [figure] }
    ];
    const { client } = clientAnswering(
      new Response(
        chunked([lines.map(line => JSON.stringify(line)).join('\n') + '\n']),
        { headers: { 'Content-Type': NDJSON } }
      )
    );
    const events: string[] = [];
    const answer = await client.run(
      { approval_token: 't' },
      (stream, text) => events.push(`${stream}:${text}`),
      undefined,
      item => events.push(`display:${Object.keys(item.data).join()}`)
    );
    expect(events).toEqual(['stdout:a\n', 'display:image/png', 'stdout:b\n']);
    expect(answer.outputs).toEqual([figure]);
  });

  it('shows a plain JSON envelope with its outputs where they came', async () => {
    const { client } = clientAnswering(
      json({
        ...RESULT,
        stdout: 'a\nb\n',
        outputs: [display({ 'text/plain': 'fig' }, 2)]
      })
    );
    const events: string[] = [];
    await client.run(
      { approval_token: 't' },
      (stream, text) => events.push(`${stream}:${text}`),
      undefined,
      item => events.push(`display:${item.data['text/plain']}`)
    );
    expect(events).toEqual(['stdout:a\n', 'display:fig', 'stdout:b\n']);
  });
});

describe('run files and sessions', () => {
  it('downloads a run file by its URL, a sub-folder keeping its slash', async () => {
    const { client, calls } = clientAnswering(new Response('a,b\n'));
    const blob = await client.runFile('run_1', 'plots/my chart.png');
    expect(await blob.text()).toBe('a,b\n');
    expect(calls[0].url).toBe(
      '/lab-base/api/sandbox/runs/run_1/files/plots/my%20chart.png'
    );
  });

  it('makes a file no longer kept a 404 ResponseError', async () => {
    const { client } = clientAnswering(
      json({ message: 'no such file', code: 'run_file_not_found' }, 404)
    );
    await expect(client.runFile('run_1', 'gone.csv')).rejects.toMatchObject({
      status: 404,
      code: 'run_file_not_found'
    });
  });

  it('lists, restarts and stops sessions by name', async () => {
    const { client, calls } = clientAnswering(
      json({ sessions: [{ name: 'a' }] }),
      json({ name: 'a' }),
      json({ name: 'a', stopped: true })
    );
    expect((await client.sessions()).map(s => s.name)).toEqual(['a']);
    await client.restartSession('a');
    await client.stopSession('a');
    expect(calls.map(c => `${c.init.method ?? 'GET'} ${c.url}`)).toEqual([
      'GET /lab-base/api/sandbox/sessions',
      'POST /lab-base/api/sandbox/sessions/a/restart',
      'DELETE /lab-base/api/sandbox/sessions/a'
    ]);
  });
});
