// Files in: Files… in the approval dialog plans again with the picked files added to the
// `inputs`, the dialog lists them (each removable), only the plan shown last (with its
// files) is approved, and a result's Re-run plans again with the inputs its run had.

import { decorateCodeBlocks } from '../src/codeblocks';
import {
  addInputs,
  decideWithFiles,
  inputName,
  removeInput
} from '../src/flow';
import { inputPaths } from '../src/filepicker';
import { OutputView, renderPlan } from '../src/render';
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

/** The first dialog matching `selector`, once it shows. */
async function shown(selector: string): Promise<HTMLElement> {
  for (let i = 0; i < 20; i++) {
    await flush();
    const node = document.querySelector<HTMLElement>(selector);
    if (node) {
      return node;
    }
  }
  throw new Error(`no dialog ${selector}`);
}

/** The open approval dialog, once it shows. */
const dialog = () => shown('.jp-gitpilot-plan-dialog');

/** The error dialog shown over the plan dialog, once it shows. */
const errorDialog = () => shown('.jp-Dialog:not(.jp-gitpilot-plan-dialog)');

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
    expect(approved?.plan.plan_id).toBe('plan_b');
    expect(approved?.inputs).toEqual(['data/sales.csv']);
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

/** A plan answer listing an input for each requested path (named as the server does). */
function planFor(body: unknown, id: string): { plan: IPlan } {
  const paths = (body as { inputs?: string[] }).inputs ?? [];
  return {
    plan: plan(id, {
      inputs: paths.map(path => ({ ...INPUT, name: inputName(path) }))
    })
  };
}

describe('inputs chosen across picks', () => {
  afterEach(() => {
    document.body.replaceChildren();
  });

  it('adds a pick to the earlier ones, each path once, and names them as the run sees them', () => {
    expect(addInputs(['a.csv'], ['b.csv', 'a.csv'])).toEqual([
      'a.csv',
      'b.csv'
    ]);
    expect(inputName('data/2024/')).toBe('2024');
    expect(removeInput(['d/a.csv', 'b.csv'], 'a.csv')).toEqual(['b.csv']);
  });

  it('a second pick adds to the first; a removed input leaves the next plan', async () => {
    let planned = 0;
    const { client, sent } = scripted({
      'GET status': status(),
      'POST plan': (body: unknown) => planFor(body, `plan_${++planned}`),
      'POST reject': { rejected: true }
    });
    const picks = [['sales.csv'], ['data/costs.csv', 'sales.csv']];
    const told: Array<readonly string[]> = [];
    const decided = decideWithFiles(
      client,
      { language: 'python', code: 'x', source: 'code_block' },
      async current => {
        told.push([...current]);
        return picks.shift() ?? null;
      }
    );
    click(buttonNamed(await dialog(), 'Files…'));
    await closed();
    click(buttonNamed(await dialog(), 'Files…'));
    await closed();
    let node = await dialog();
    const list = node.querySelector('.jp-gitpilot-plan-inputs');
    expect(
      Array.from(list?.querySelectorAll('li') ?? []).map(li => li.dataset.name)
    ).toEqual(['sales.csv', 'costs.csv']);
    // Each can be taken out again.
    click(
      node.querySelector(
        'button[aria-label="Remove sales.csv from the run\'s files"]'
      )
    );
    await closed();
    node = await dialog();
    expect(
      Array.from(node.querySelectorAll('.jp-gitpilot-plan-inputs li')).map(
        li => (li as HTMLElement).dataset.name
      )
    ).toEqual(['costs.csv']);
    click(node.querySelector('.jp-mod-accept'));
    expect(await decided).toMatchObject({
      plan: { plan_id: 'plan_4' },
      inputs: ['data/costs.csv']
    });
    expect(told).toEqual([[], ['sales.csv']]);
    expect(
      sent.filter(s => s.endpoint === 'plan').map(s => s.body)
    ).toMatchObject([
      {},
      { inputs: ['sales.csv'] },
      { inputs: ['sales.csv', 'data/costs.csv'] },
      { inputs: ['data/costs.csv'] }
    ]);
    // Every plan but the approved one was dropped.
    expect(sent.filter(s => s.endpoint === 'reject')).toHaveLength(3);
  });

  it('a pick past the caps says so and keeps the files chosen before', async () => {
    let planned = 0;
    const { client } = scripted({
      'GET status': status(),
      'POST plan': (body: unknown) =>
        ((body as { inputs?: string[] }).inputs ?? []).length > 1
          ? [
              400,
              {
                message:
                  "inputs hold more than 100 MB (the administrator's max_input_bytes)",
                code: 'inputs_too_large'
              }
            ]
          : planFor(body, `plan_${++planned}`),
      'POST reject': { rejected: true }
    });
    const picks = [['sales.csv'], ['big.bin']];
    const decided = decideWithFiles(
      client,
      { language: 'python', code: 'x', source: 'code_block' },
      async () => picks.shift() ?? null
    );
    click(buttonNamed(await dialog(), 'Files…'));
    await closed();
    click(buttonNamed(await dialog(), 'Files…'));
    await closed();
    const error = await errorDialog();
    expect(error.textContent).toContain(
      'Too much for one run: the files were not added'
    );
    expect(error.textContent).toContain('max_input_bytes');
    click(error.querySelector('button'));
    const node = await dialog();
    expect(
      node.querySelector('.jp-gitpilot-plan-inputs')?.textContent
    ).toContain('sales.csv');
    expect(node.textContent).not.toContain('big.bin');
    click(node.querySelector('.jp-mod-accept'));
    expect((await decided)?.inputs).toEqual(['sales.csv']);
  });

  it('a request whose own inputs are refused goes on without them', async () => {
    const { client } = scripted({
      'GET status': status(),
      'POST plan': (body: unknown) =>
        (body as { inputs?: string[] }).inputs
          ? [
              400,
              { message: 'input gone.csv: no such file', code: 'input_missing' }
            ]
          : planFor(body, 'plan_a'),
      'POST reject': { rejected: true }
    });
    const decided = decideWithFiles(
      client,
      {
        language: 'python',
        code: 'x',
        source: 'code_block',
        inputs: ['gone.csv']
      },
      async () => null
    );
    const error = await errorDialog();
    expect(error.textContent).toContain('no such file');
    click(error.querySelector('button'));
    click((await dialog()).querySelector('.jp-mod-accept'));
    expect((await decided)?.inputs).toEqual([]);
  });
});

describe('Re-run keeps the inputs', () => {
  it("hands the run's inputs to the block's Re-run, none to its ▶ Run", () => {
    const root = document.createElement('div');
    root.innerHTML = '<pre><code class="language-python">print(1)</code></pre>';
    const runs: string[][] = [];
    decorateCodeBlocks(root, (_block, inputs) => runs.push(inputs));
    click(root.querySelector('.jp-gitpilot-run-button'));
    const view = new OutputView();
    view.inputs = ['sales.csv', 'data'];
    root.querySelector('.jp-gitpilot-codeblock-output')?.appendChild(view.node);
    view.finish({
      backend: 'subprocess',
      language: 'python',
      command: ['python'],
      exit_code: 0,
      stdout: '1\n',
      stderr: '',
      duration_ms: 5,
      truncated: false,
      timed_out: false,
      sandbox_id: null,
      run_id: 'run_1',
      plan_id: 'plan_1',
      isolation: []
    });
    click(buttonNamed(view.node, '↻ Re-run'));
    expect(runs).toEqual([[], ['sales.csv', 'data']]);
  });
});
