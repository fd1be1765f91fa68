// What the jsdom tests of the panels share: a status, a scripted sandbox API, clicks.

import { SandboxClient } from '../src/request';
import type { IStatus } from '../src/types';

/** A healthy `subprocess` status, with `overrides`. */
export function status(overrides: Partial<IStatus> = {}): IStatus {
  return {
    backend: 'subprocess',
    ok: true,
    error: null,
    env_override: null,
    has_token: false,
    require_approval: true,
    isolation: [],
    settings: {
      backend: 'subprocess',
      matrixlab_url: 'http://localhost:8765',
      matrixlab_image: '',
      allow_network: false,
      timeout_sec: 120,
      has_token: false
    },
    ...overrides
  };
}

/** A route's answer: a body, [status, body], or a function of the request body. */
export type Route = unknown | ((body: unknown) => unknown);

/** The reason phrases of the statuses the tests answer with. */
const REASONS: Record<number, string> = {
  200: 'OK',
  400: 'Bad Request',
  404: 'Not Found',
  500: 'Internal Server Error',
  503: 'Service Unavailable'
};

/** A client whose server answers from `routes` ("METHOD endpoint" → a {@link Route}). */
export function scripted(routes: Record<string, Route>) {
  const sent: Array<{ method: string; endpoint: string; body: unknown }> = [];
  const client = new SandboxClient('/', async (url, init) => {
    const endpoint = url.replace('/api/sandbox/', '');
    const method = init.method ?? 'GET';
    const body = init.body ? JSON.parse(String(init.body)) : null;
    sent.push({ method, endpoint, body });
    let answer = routes[`${method} ${endpoint}`];
    if (typeof answer === 'function') {
      answer = answer(body);
    }
    const [code, payload] = Array.isArray(answer) ? answer : [200, answer];
    // jsdom has no fetch Response: the client only reads these members.
    return {
      ok: code < 400,
      status: code,
      statusText: REASONS[code] ?? 'Error',
      text: async () => JSON.stringify(payload)
    } as unknown as Response;
  });
  return { client, sent };
}

/** Lets pending promises and timers of 0 ms run. */
export const flush = () => new Promise(resolve => setTimeout(resolve, 0));

export function click(button: Element | null | undefined) {
  button?.dispatchEvent(new MouseEvent('click', { bubbles: true }));
}

/** The button in `root` labelled `text`, if there is one. */
export function buttonNamed(
  root: Element,
  text: string
): HTMLButtonElement | undefined {
  return Array.from(root.querySelectorAll('button')).find(
    b => b.textContent === text
  );
}
