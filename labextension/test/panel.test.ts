// The settings panel and status bar item in jsdom, against a scripted sandbox API.

import { SandboxModel } from '../src/model';
import { SandboxPanel } from '../src/panel';
import { SandboxStatusItem } from '../src/statusbar';
import type { IStatus } from '../src/types';

import {
  buttonNamed,
  click,
  flush,
  scripted,
  status as healthy
} from './support';

/** The shared status, with the tempdir layer these tests always had. */
const status = (overrides: Partial<IStatus> = {}): IStatus =>
  healthy({ isolation: ['tempdir'], ...overrides });

const LIFECYCLE_OFF = {
  installed: false,
  running: false,
  docker_available: true,
  lifecycle_enabled: false,
  instructions: ['docker pull runner']
};

async function openPanel(routes: Record<string, unknown>) {
  const { client, sent } = scripted({
    'GET matrixlab/lifecycle': LIFECYCLE_OFF,
    ...routes
  });
  const model = new SandboxModel(client);
  const panel = new SandboxPanel(model);
  document.body.appendChild(panel.node);
  await panel.load();
  const q = <T extends Element>(selector: string) =>
    panel.node.querySelector(selector) as T;
  return { panel, model, sent, q };
}

describe('SandboxPanel', () => {
  afterEach(() => (document.body.innerHTML = ''));

  it('shows the env override badge naming the variable', async () => {
    const { q } = await openPanel({
      'GET status': status({ env_override: 'GITPILOT_SANDBOX', backend: 'off' })
    });
    const badge = q<HTMLElement>('.jp-gitpilot-header .jp-gitpilot-badge');
    expect(badge.hidden).toBe(false);
    expect(badge.textContent).toBe('set by the environment: GITPILOT_SANDBOX');
  });

  it('hides the badge without an override and checks the saved backend', async () => {
    const { q } = await openPanel({ 'GET status': status() });
    expect(
      q<HTMLElement>('.jp-gitpilot-header .jp-gitpilot-badge').hidden
    ).toBe(true);
    expect(q<HTMLInputElement>('input[value="subprocess"]').checked).toBe(true);
  });

  it('follows a backend change made elsewhere unless the user picked another', async () => {
    const { model, q } = await openPanel({ 'GET status': status() });
    const radio = (name: string) =>
      q<HTMLInputElement>(`input[value="${name}"]`);
    model.set(
      status({
        backend: 'off',
        settings: { ...status().settings, backend: 'off' }
      })
    );
    expect(radio('off').checked).toBe(true);
    radio('matrixlab').checked = true;
    model.set(status());
    expect(radio('matrixlab').checked).toBe(true);
  });

  it('shows a saved token as bullets and never sends it unless typed', async () => {
    const saved = status({
      has_token: true,
      settings: { ...status().settings, has_token: true }
    });
    const { panel, sent, q } = await openPanel({
      'GET status': saved,
      'PUT config': saved
    });
    const token = q<HTMLInputElement>('input[name="matrixlab_token"]');
    expect(token.value).toBe('');
    expect(token.placeholder).toBe('••••••••');
    expect(panel.changes()).not.toHaveProperty('matrixlab_token');

    click(buttonNamed(panel.node, 'Clear'));
    expect(panel.changes().matrixlab_token).toBe('');

    token.value = 'new-token';
    token.dispatchEvent(new Event('input'));
    expect(panel.changes().matrixlab_token).toBe('new-token');
    click(buttonNamed(panel.node, 'Save'));
    await flush();
    await flush();
    const put = sent.find(s => s.method === 'PUT');
    // Only what changed: the token, not the fields the user left alone.
    expect(put?.body).toEqual({ matrixlab_token: 'new-token' });
    expect(token.value).toBe('');
  });

  it('Save sends only the fields that changed, and nothing when nothing did', async () => {
    const { panel, sent, q } = await openPanel({
      'GET status': status(),
      'PUT config': status({
        settings: { ...status().settings, timeout_sec: 30 }
      })
    });
    click(buttonNamed(panel.node, 'Save'));
    await flush();
    expect(sent.filter(s => s.method === 'PUT')).toHaveLength(0);
    expect(q<HTMLElement>('.jp-gitpilot-message').textContent).toBe(
      'Nothing changed: nothing to save.'
    );

    const timeout = q<HTMLInputElement>('input[name="timeout_sec"]');
    timeout.value = '30';
    click(buttonNamed(panel.node, 'Save'));
    await flush();
    await flush();
    expect(sent.filter(s => s.method === 'PUT').map(s => s.body)).toEqual([
      { timeout_sec: 30 }
    ]);
  });

  it('asks before saving MatrixLab right after the test said "Not reachable"', async () => {
    const { panel, sent, q } = await openPanel({
      'GET status': status(),
      'POST matrixlab/test': {
        ok: false,
        reachable: false,
        error: 'connection refused'
      }
    });
    click(buttonNamed(panel.node, 'Test connection'));
    await flush();
    await flush();
    expect(q<HTMLElement>('.jp-gitpilot-report').textContent).toContain(
      'Not reachable'
    );
    q<HTMLInputElement>('input[value="matrixlab"]').checked = true;
    click(buttonNamed(panel.node, 'Save'));
    await flush();
    await flush();
    // The warning dialog is up, Cancel first; nothing was saved yet.
    const dialog = document.querySelector('.jp-Dialog') as HTMLElement;
    expect(dialog?.textContent).toContain('did not answer the connection test');
    expect(sent.filter(s => s.method === 'PUT')).toHaveLength(0);
    click(buttonNamed(dialog, 'Cancel'));
    await flush();
    await flush();
    expect(sent.filter(s => s.method === 'PUT')).toHaveLength(0);
    expect(q<HTMLElement>('.jp-gitpilot-message').textContent).toBe(
      'Not saved.'
    );
  });

  it('shows a refused save as the server message', async () => {
    const refusal = 'network on for every run needs the administrator';
    const { panel, q } = await openPanel({
      'GET status': status(),
      'PUT config': [
        403,
        { message: refusal, reason: 'Forbidden', code: 'setting_not_allowed' }
      ]
    });
    q<HTMLInputElement>('input[name="allow_network"]').checked = true;
    click(buttonNamed(panel.node, 'Save'));
    await flush();
    await flush();
    const message = q<HTMLElement>('.jp-gitpilot-message');
    expect(message.getAttribute('role')).toBe('alert');
    expect(message.textContent).toBe(refusal);
  });

  it("marks a time limit out of the server's range and keeps Save off meanwhile", async () => {
    const { panel, sent, q } = await openPanel({
      'GET status': status({ max_timeout_sec: 300 }),
      'PUT config': status({
        max_timeout_sec: 300,
        settings: { ...status().settings, timeout_sec: 30 }
      })
    });
    const timeout = q<HTMLInputElement>('input[name="timeout_sec"]');
    const save = buttonNamed(panel.node, 'Save')!;
    const error = document.getElementById(
      timeout.getAttribute('aria-describedby')!
    )!;
    expect(timeout.closest('label')?.textContent).toBe(
      'Time limit (seconds, 1–300)'
    );
    expect([timeout.min, timeout.max]).toEqual(['1', '300']);
    expect(timeout.hasAttribute('aria-invalid')).toBe(false);
    expect(error.hidden).toBe(true);
    for (const bad of ['301', '0', '2.5', '']) {
      timeout.value = bad;
      timeout.dispatchEvent(new Event('input', { bubbles: true }));
      expect(timeout.getAttribute('aria-invalid')).toBe('true');
      expect(error.hidden).toBe(false);
      expect(error.textContent).toBe(
        'Enter a whole number of seconds from 1 to 300.'
      );
      expect(save.disabled).toBe(true);
    }
    click(save);
    await flush();
    expect(sent.filter(s => s.method === 'PUT')).toHaveLength(0);

    timeout.value = '30';
    timeout.dispatchEvent(new Event('input', { bubbles: true }));
    expect(timeout.hasAttribute('aria-invalid')).toBe(false);
    expect(error.hidden).toBe(true);
    expect(save.disabled).toBe(false);
    click(save);
    await flush();
    await flush();
    expect(sent.filter(s => s.method === 'PUT').map(s => s.body)).toEqual([
      { timeout_sec: 30 }
    ]);
  });

  it("offers the schema's range until the server says its own", async () => {
    const { q } = await openPanel({ 'GET status': status() });
    const timeout = q<HTMLInputElement>('input[name="timeout_sec"]');
    expect(timeout.max).toBe('600');
    timeout.value = '601';
    timeout.dispatchEvent(new Event('input', { bubbles: true }));
    expect(timeout.getAttribute('aria-invalid')).toBe('true');
  });

  it('shows a backend the administrator does not allow as theirs', async () => {
    const { q } = await openPanel({
      'GET status': status({ allowed_backends: ['subprocess', 'matrixlab'] })
    });
    const off = q<HTMLInputElement>('input[name="backend"][value="off"]');
    expect(off.disabled).toBe(true);
    expect(off.parentElement?.title).toBe(
      'Set by the administrator: not allowed on this server.'
    );
    const local = q<HTMLInputElement>(
      'input[name="backend"][value="subprocess"]'
    );
    expect(local.disabled).toBe(false);
  });

  it('disables Install / Start / Stop with the reason and the manual steps', async () => {
    const { panel, q } = await openPanel({ 'GET status': status() });
    const install = buttonNamed(panel.node, 'Install')!;
    expect(install.disabled).toBe(true);
    expect(install.title).toContain('GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1');
    expect(q<HTMLElement>('.jp-gitpilot-manual').hidden).toBe(false);
    expect(q<HTMLElement>('.jp-gitpilot-manual').textContent).toContain(
      'docker pull runner'
    );
  });

  it('runs a lifecycle action and shows its steps', async () => {
    const on = { ...LIFECYCLE_OFF, lifecycle_enabled: true };
    const { panel, q, sent } = await openPanel({
      'GET status': status(),
      'GET matrixlab/lifecycle': on,
      'POST matrixlab/start': {
        ok: true,
        steps: [
          {
            cmd: 'docker run -d --name gitpilot-matrixlab x',
            exit_code: 0,
            stdout: 'abc',
            stderr: '',
            duration_ms: 9
          }
        ]
      }
    });
    const start = buttonNamed(panel.node, 'Start')!;
    expect(start.disabled).toBe(false);
    click(start);
    for (let i = 0; i < 5; i++) {
      await flush();
    }
    expect(
      sent.some(s => s.method === 'POST' && s.endpoint === 'matrixlab/start')
    ).toBe(true);
    expect(q<HTMLElement>('.jp-gitpilot-transcript').textContent).toContain(
      '✓ docker run -d --name gitpilot-matrixlab x'
    );
  });
});

describe('SandboxModel', () => {
  afterEach(() => jest.useRealTimers());

  it('polls the status at the interval and stops when told', async () => {
    jest.useFakeTimers();
    const { client, sent } = scripted({ 'GET status': status() });
    const model = new SandboxModel(client);
    model.poll(30);
    jest.advanceTimersByTime(30_000);
    expect(sent.filter(s => s.endpoint === 'status')).toHaveLength(1);
    jest.advanceTimersByTime(60_000);
    expect(sent.filter(s => s.endpoint === 'status')).toHaveLength(3);
    model.poll(0);
    jest.advanceTimersByTime(90_000);
    expect(sent.filter(s => s.endpoint === 'status')).toHaveLength(3);
    model.dispose();
  });

  it('keeps the fetch error for the status bar to show', async () => {
    const { client } = scripted({
      'GET status': [503, { message: 'server is shutting down' }]
    });
    const model = new SandboxModel(client);
    await model.refresh();
    expect(model.error).toBe('server is shutting down');
  });
});

describe('SandboxStatusItem', () => {
  it('follows the model and opens the panel on click or Enter', async () => {
    const { client } = scripted({
      'GET status': status({
        backend: 'matrixlab',
        ok: false,
        error: 'cannot reach'
      })
    });
    const model = new SandboxModel(client);
    let opened = 0;
    const item = new SandboxStatusItem(model, () => (opened += 1));
    await model.refresh();
    expect(item.node.textContent).toBe('Sandbox: MatrixLab — unreachable');
    expect(item.node.title).toContain('cannot reach');
    // A Runner that answers but refuses every run (network on, not isolated) is no outage.
    const refusal =
      'refused: with network on, a run on the MatrixLab Runner ...';
    model.set(
      status({ backend: 'matrixlab', ok: false, error: refusal, remote: {} })
    );
    expect(item.node.textContent).toBe('Sandbox: MatrixLab — error');
    expect(item.node.title).toContain(refusal);
    model.set(status());
    expect(item.node.textContent).toBe('Sandbox: Local');
    click(item.node);
    item.node.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    expect(opened).toBe(2);
  });

  it('shows Pass-through as a warning that says what it means and how to leave it', async () => {
    const off = status({
      backend: 'off',
      settings: { ...status().settings, backend: 'off' }
    });
    const { client } = scripted({ 'GET status': off });
    const model = new SandboxModel(client);
    const item = new SandboxStatusItem(model, () => undefined);
    await model.refresh();
    expect(item.node.textContent).toBe('Sandbox: Pass-through');
    expect(item.node.classList.contains('jp-mod-warn')).toBe(true);
    expect(item.node.title.split('\n')).toEqual([
      'Sandbox: Pass-through',
      "Warning: Pass-through has no isolation: every snippet runs directly on the server's host, as you, and the network is not blocked.",
      'To change it, choose Local or MatrixLab in the sandbox settings.',
      'Click to open the sandbox settings.'
    ]);
    model.set(status());
    expect(item.node.classList.contains('jp-mod-warn')).toBe(false);
    expect(item.node.title).not.toContain('Warning');
  });
});
