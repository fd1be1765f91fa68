// Plan and result rendering, code block decoration and labels, in jsdom.

import { decorateCodeBlocks, ICodeBlock } from '../src/codeblocks';
import { fenceLanguage, fileLanguage, statusText } from '../src/labels';
import { MAX_ENTRIES, MAX_OUTPUT, RunHistory } from '../src/history';
import {
  lifecycleBlocker,
  MAX_REASON,
  renderStep,
  stepFailure
} from '../src/lifecycle';
import { OutputView, renderPlan } from '../src/render';
import type { IPlan, IStatus } from '../src/types';
import { result } from './fixtures';

function plan(overrides: Partial<IPlan> = {}): IPlan {
  return {
    plan_id: 'plan_0123456789abcdef',
    goal: 'Run a python code block',
    source: 'code_block',
    language: 'python',
    command: ['python', 'inline.py'],
    backend: 'subprocess',
    timeout_sec: 120,
    network: false,
    checks: [
      { label: 'language is supported', ok: true },
      { label: 'no destructive pattern', ok: true }
    ],
    warnings: [],
    blocked: false,
    blocked_reason: null,
    requires_approval: true,
    digest: 'd',
    created_at: 0,
    code: 'print(2+2)',
    session: null,
    ...overrides
  };
}

describe('renderPlan', () => {
  it('shows language, backend, timeout, network, checks and the code', () => {
    const text = renderPlan(plan()).textContent ?? '';
    expect(text).toContain('python');
    expect(text).toContain('Runs inLocal');
    expect(text).toContain('120 s');
    expect(text).toContain('Networkblocked');
    expect(text).toContain('✓ no destructive pattern');
    expect(text).toContain('print(2+2)');
    expect(text).toContain('No warnings');
  });

  it('lists warnings with their severity', () => {
    const node = renderPlan(
      plan({
        warnings: [
          {
            severity: 'high',
            label: 'os.system',
            detail: 'runs a shell command'
          }
        ]
      })
    );
    const item = node.querySelector('.jp-gitpilot-plan-warnings li');
    expect(item?.querySelector('.jp-gitpilot-badge-high')?.textContent).toBe(
      'high'
    );
    expect(item?.textContent).toContain('os.system — runs a shell command');
  });

  it('says a blocked plan cannot be approved, with the reason', () => {
    const node = renderPlan(
      plan({ blocked: true, blocked_reason: "destructive pattern 'rm -rf /'" })
    );
    const banner = node.querySelector('[role="alert"]');
    expect(banner?.textContent).toContain('rm -rf /');
    expect(banner?.textContent).toContain('cannot be approved');
  });

  it('names the file of a file plan', () => {
    expect(
      renderPlan(plan({ file: 'scripts/hello.py' })).textContent
    ).toContain('scripts/hello.py');
  });
});

describe('OutputView', () => {
  it('appends streamed text in order and marks stderr', () => {
    const view = new OutputView();
    view.append('stdout', 'a');
    view.append('stdout', 'b');
    view.append('stderr', 'E');
    view.append('stdout', 'c');
    expect(view.text).toBe('abEc');
    view.flush();
    expect(view.node.querySelector('.jp-gitpilot-stderr')?.textContent).toBe(
      'E'
    );
    expect(view.node.textContent).toContain('Running…');
  });

  it('shows exit code, duration and backend when done', () => {
    const view = new OutputView();
    view.finish(result());
    const footer =
      view.node.querySelector('.jp-gitpilot-result-summary')?.textContent ?? '';
    expect(footer).toContain('exit 0');
    expect(footer).toContain('15 ms');
    expect(footer).not.toContain('timed out');
    expect(view.node.textContent).not.toContain('Running…');
    expect(view.node.classList.contains('jp-mod-failed')).toBe(false);
  });

  it('shows timed-out and truncated badges and marks the failure', () => {
    const view = new OutputView();
    view.finish(result({ exit_code: -1, timed_out: true, truncated: true }));
    const footer =
      view.node.querySelector('.jp-gitpilot-result-summary')?.textContent ?? '';
    expect(footer).toContain('exit -1');
    expect(footer).toContain('timed out');
    expect(footer).toContain('truncated');
    expect(view.node.classList.contains('jp-mod-failed')).toBe(true);
  });

  it('puts the badges above the output, which scrolls in its own box', () => {
    const view = new OutputView();
    view.append('stdout', 'x'.repeat(1000));
    view.finish(result({ exit_code: -1, timed_out: true, truncated: true }));
    const children = Array.from(view.node.children);
    const state = view.node.querySelector('.jp-gitpilot-output-state')!;
    const text = view.node.querySelector('.jp-gitpilot-output-text')!;
    expect(children.indexOf(state)).toBeLessThan(children.indexOf(text));
    expect(state.textContent).toContain('truncated');
    expect((text as HTMLElement).tabIndex).toBe(0);
  });

  it('offers Stop while running; Stop calls back once and says Stopping…', () => {
    const view = new OutputView();
    const calls: string[] = [];
    view.running(() => calls.push('stop'));
    const stop = view.node.querySelector(
      '.jp-gitpilot-stop-button'
    ) as HTMLButtonElement;
    expect(stop.getAttribute('aria-label')).toBe('Stop the run');
    stop.click();
    stop.click();
    expect(calls).toEqual(['stop']);
    expect(stop.disabled).toBe(true);
    expect(stop.textContent).toBe('Stopping…');
  });

  it('says a stopped run was stopped, in one line, and keeps its output', () => {
    const view = new OutputView();
    view.running(() => undefined);
    view.append('stdout', 'first\n');
    view.finish(result({ exit_code: -1, cancelled: true, duration_ms: 1234 }));
    const summary = view.node.querySelector('.jp-gitpilot-result-summary')!;
    expect(summary.textContent).toBe('stoppedStopped after 1.2 s.');
    expect(view.node.querySelector('.jp-gitpilot-stop-button')).toBeNull();
    expect(view.text).toBe('first\n');
    expect(view.node.classList.contains('jp-mod-failed')).toBe(false);
    expect(view.node.classList.contains('jp-mod-stopped')).toBe(true);
  });

  it('replays a kept run with its output and says it is an earlier one', () => {
    const history = new RunHistory(window.localStorage);
    const view = new OutputView();
    view.append('stdout', '4\n');
    view.append('stderr', 'warn\n');
    history.put(
      'python',
      'print(2+2)',
      view.segments,
      result({ stdout: '4\n' }),
      0
    );
    const stored = history.get('python', 'print(2+2)')!;
    expect(stored.result.stdout).toBe('');
    expect(history.get('python', 'print(3)')).toBeNull();
    const again = new OutputView();
    again.replay(stored);
    expect(again.text).toBe('4\nwarn\n');
    expect(again.node.textContent).toContain('exit 0');
    expect(again.node.textContent).toContain('earlier run');
  });

  it('keeps only the newest results, each cut to its limit', () => {
    const history = new RunHistory(window.localStorage);
    for (let i = 0; i < MAX_ENTRIES + 5; i++) {
      history.put(
        'python',
        `print(${i})`,
        [['stdout', 'x'.repeat(MAX_OUTPUT + 10)]],
        result(),
        i
      );
    }
    expect(history.get('python', 'print(0)')).toBeNull();
    const newest = history.get('python', `print(${MAX_ENTRIES + 4})`)!;
    expect(newest.segments[0][1]).toHaveLength(MAX_OUTPUT);
    expect(newest.result.truncated).toBe(true);
  });

  it('shows an error message as an alert', () => {
    const view = new OutputView();
    view.fail('Runner unreachable');
    expect(view.node.querySelector('[role="alert"]')?.textContent).toBe(
      'Runner unreachable'
    );
  });
});

describe('decorateCodeBlocks', () => {
  function markdown(html: string): HTMLElement {
    const root = document.createElement('div');
    root.innerHTML = html;
    return root;
  }

  it('adds a Run button to runnable fences only, once', () => {
    const root = markdown(
      '<pre><code class="language-python"><span>print</span>(2+2)</code></pre>' +
        '<pre><code class="language-sh">echo hi</code></pre>' +
        '<pre><code class="language-json">{}</code></pre>' +
        '<pre><code>plain</code></pre>'
    );
    const runs: ICodeBlock[] = [];
    expect(decorateCodeBlocks(root, block => runs.push(block))).toBe(2);
    expect(decorateCodeBlocks(root, block => runs.push(block))).toBe(0);
    const buttons = root.querySelectorAll('button');
    expect(buttons).toHaveLength(2);
    buttons[0].click();
    buttons[1].click();
    expect(runs.map(r => [r.language, r.code])).toEqual([
      ['python', 'print(2+2)'],
      ['bash', 'echo hi']
    ]);
    expect(
      runs[0].outputHost.previousElementSibling?.contains(buttons[0])
    ).toBe(true);
  });
});

describe('labels', () => {
  it('maps fence aliases like the server does', () => {
    expect(['py', 'Python3', ' node ', 'shell'].map(fenceLanguage)).toEqual([
      'python',
      'python',
      'javascript',
      'bash'
    ]);
    expect(fenceLanguage('ruby')).toBeNull();
    expect(fileLanguage('a/b/run.SH')).toBe('bash');
    expect(fileLanguage('notes.md')).toBeNull();
  });

  it('writes the status bar text from the status', () => {
    const status = { backend: 'matrixlab', ok: false } as IStatus;
    expect(statusText(status, null)).toBe('Sandbox: MatrixLab — unreachable');
    expect(
      statusText({ ...status, backend: 'subprocess', ok: true }, null)
    ).toBe('Sandbox: Local');
    expect(statusText({ ...status, backend: 'off', ok: true }, null)).toBe(
      'Sandbox: Pass-through'
    );
    expect(statusText(null, 'Network error')).toBe('Sandbox: unavailable');
  });
});

describe('lifecycle', () => {
  const failed = (stderr: string) => ({
    cmd: 'docker run -d --name gitpilot-matrixlab-runner --restart unless-stopped -p 127.0.0.1:8765:8000 -v /var/run/docker.sock:/var/run/docker.sock runner:latest',
    exit_code: 1,
    stdout: '',
    stderr,
    duration_ms: 40
  });

  it("says why a step failed in Docker's words, not with its command line", () => {
    const cause =
      'driver failed programming external connectivity on endpoint gitpilot-matrixlab-runner (0123456789abcdef0123456789abcdef): Error starting userland proxy: listen tcp4 127.0.0.1:8765: bind: address already in use';
    const reason = stepFailure(failed(cause));
    expect(reason.length).toBeLessThanOrEqual(MAX_REASON);
    expect(reason).toMatch(/^….*bind: address already in use$/);
    expect(reason).not.toContain('docker run');
    expect(stepFailure(failed('No such image: runner:latest\n'))).toBe(
      'No such image: runner:latest'
    );
  });

  it('names the docker command when Docker gave no reason', () => {
    expect(stepFailure(failed(''))).toBe('docker run exited with 1');
  });

  it('names the flag when the lifecycle is off', () => {
    const state = {
      installed: false,
      running: false,
      docker_available: true,
      lifecycle_enabled: false
    };
    expect(lifecycleBlocker(state)).toContain(
      'GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1'
    );
    expect(
      lifecycleBlocker({
        ...state,
        lifecycle_enabled: true,
        docker_available: false
      })
    ).toContain('Docker');
    expect(lifecycleBlocker({ ...state, lifecycle_enabled: true })).toBeNull();
  });

  it('renders a failed step open with its command and output', () => {
    const step = renderStep({
      cmd: 'docker pull x',
      exit_code: 1,
      stdout: '',
      stderr: 'denied',
      duration_ms: 5
    });
    expect((step as HTMLDetailsElement).open).toBe(true);
    expect(step.textContent).toContain('docker pull x');
    expect(step.textContent).toContain('denied');
  });
});
