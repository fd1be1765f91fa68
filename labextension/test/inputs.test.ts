// Files in: Files… in the approval dialog plans again with the picked files as `inputs`,
// the dialog lists them, and only the plan shown last (with its files) is approved.

import { decideWithFiles } from '../src/flow';
import { inputPaths } from '../src/filepicker';
import { renderPlan } from '../src/render';
import type { IPlan } from '../src/types';
import { buttonNamed, click, flush, scripted, status } from './support';

const INPUT = {
  name: 'sales.csv',
  kind: 'file' as const,
  size: 2048,
  sha256: 'sha256:' + 'c'.repeat(64),
  files: 1
};

function plan(id: string, overrides: Partial<IPlan> = {}): IPlan {
  return {
    plan_id: id,
    goal: 'Run a python code block',
    source: 'code_block',
    language: 'python',
    command: ['python', 'inline.py'],
    backend: 'subprocess',
    timeout_sec: 120,
    network: false,
    checks: [],
    warnings: [],
    blocked: false,
    requires_approval: true,
    digest: 'd',
    created_at: 0,
    code: 'print(open("sales.csv").read())',
    session: null,
    ...overrides
  };
}

/** The open approval dialog, once it shows. */
async function dialog(): Promise<HTMLElement> {
  for (let i = 0; i < 20; i++) {
    await flush();
    const node = document.querySelector<HTMLElement>(
      '.jp-gitpilot-plan-dialog'
    );
    if (node) {
      return node;
    }
  }
  throw new Error('no approval dialog');
}

async function closed(): Promise<void> {
  for (
    let i = 0;
    i < 20 && document.querySelector('.jp-gitpilot-plan-dialog');
    i++
  ) {
    await flush();
  }
}

describe('renderPlan lists what goes in', () => {
  it('shows "Files in" with each name, size and hash start', () => {
    const text = renderPlan(plan('p', { inputs: [INPUT] })).textContent ?? '';
    expect(text).toContain('Files in');
    expect(text).toContain('sales.csv');
    expect(text).toContain('2.0 KB');
    expect(text).toContain('sha256 cccccccccccc');
  });

  it('shows a folder with its file count', () => {
    const text =
      renderPlan(
        plan('p', {
          inputs: [{ ...INPUT, name: 'data', kind: 'dir', files: 3 }]
        })
      ).textContent ?? '';
    expect(text).toContain('data/');
    expect(text).toContain('3 files');
  });

  it('shows no "Files in" for a plan without inputs', () => {
    expect(renderPlan(plan('p')).textContent).not.toContain('Files in');
  });

  it('shows the session a cell runs in', () => {
    expect(
      renderPlan(plan('p', { session: 'analysis' })).textContent
    ).toContain('Sessionanalysis');
    expect(renderPlan(plan('p')).textContent).not.toContain('Session');
  });
});

describe('inputPaths', () => {
  it('never hands the whole root, nor a path twice', () => {
    expect(inputPaths([{ path: '' }])).toEqual([]);
    expect(
      inputPaths([{ path: 'a.csv' }, { path: 'd/b' }, { path: 'a.csv' }])
    ).toEqual(['a.csv', 'd/b']);
  });
});

describe('decideWithFiles', () => {
  afterEach(() => {
    document.body.replaceChildren();
  });

  it('plans again with the picked files and approves that plan only', async () => {
    const plans = [plan('plan_a'), plan('plan_b', { inputs: [INPUT] })];
    const { client, sent } = scripted({
      'GET status': status(),
      'POST plan': () => ({ plan: plans.shift() }),
      'POST reject': { rejected: true }
    });
    const picked: Array<readonly string[]> = [];
    const decided = decideWithFiles(
      client,
      { language: 'python', code: 'x', source: 'code_block' },
      async current => {
        picked.push(current);
        return ['data/sales.csv'];
      }
    );
    let node = await dialog();
    expect(node.textContent).not.toContain('Files in');
    click(buttonNamed(node, 'Files…'));
    await closed();
    node = await dialog();
    expect(node.textContent).toContain('Files in');
    expect(node.textContent).toContain('sales.csv');
    click(node.querySelector('.jp-mod-accept'));
    const approved = await decided;
    expect(approved?.plan_id).toBe('plan_b');
    expect(picked).toEqual([[]]);
    const planned = sent.filter(s => s.endpoint === 'plan').map(s => s.body);
    expect(planned).toEqual([
      { language: 'python', code: 'x', source: 'code_block' },
      {
        language: 'python',
        code: 'x',
        source: 'code_block',
        inputs: ['data/sales.csv']
      }
    ]);
    // The plan shown before the files were picked can never run.
    expect(sent.filter(s => s.endpoint === 'reject').map(s => s.body)).toEqual([
      { plan_id: 'plan_a' }
    ]);
  });

  it('offers no Files… where there is no file picker', async () => {
    const { client } = scripted({
      'GET status': status(),
      'POST plan': { plan: plan('plan_a') },
      'POST reject': { rejected: true }
    });
    const decided = decideWithFiles(
      client,
      { file: 'hello.py', source: 'file_run' },
      null
    );
    const node = await dialog();
    expect(buttonNamed(node, 'Files…')).toBeUndefined();
    click(buttonNamed(node, 'Cancel'));
    expect(await decided).toBeNull();
  });

  it('goes back to the files chosen before when the server refuses a pick', async () => {
    const { client, sent } = scripted({
      'GET status': status(),
      'POST plan': (body: unknown) =>
        (body as { inputs?: string[] }).inputs
          ? [
              400,
              {
                message: 'input link.csv points outside its tree',
                code: 'input_symlink'
              }
            ]
          : { plan: plan('plan_a') },
      'POST reject': { rejected: true }
    });
    const decided = decideWithFiles(
      client,
      { language: 'python', code: 'x', source: 'code_block' },
      async () => ['link.csv']
    );
    click(buttonNamed(await dialog(), 'Files…'));
    await closed();
    // The refusal, in words, then the plan without the refused files.
    let error: HTMLElement | null = null;
    for (let i = 0; i < 20 && !error; i++) {
      await flush();
      error = document.querySelector(
        '.jp-Dialog:not(.jp-gitpilot-plan-dialog)'
      );
    }
    expect(error?.textContent).toContain('points outside its tree');
    click(
      buttonNamed(error as HTMLElement, 'Dismiss') ??
        error?.querySelector('button')
    );
    const node = await dialog();
    expect(node.textContent).not.toContain('Files in');
    click(buttonNamed(node, 'Cancel'));
    expect(await decided).toBeNull();
    expect(sent.filter(s => s.endpoint === 'plan')).toHaveLength(3);
  });
});
