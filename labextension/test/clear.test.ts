// ▶ Run's Clear forgets the block's kept run: a reload brings back nothing.

import { decorateCodeBlocks } from '../src/codeblocks';
import { RunHistory, STORAGE_KEY } from '../src/history';
import { forgetOnClear, restoreCodeBlock } from '../src/markdown';
import type { IRunResult } from '../src/types';

// What a run's summary reads (the stored envelope's other fields do not matter here).
const RESULT = {
  backend: 'subprocess',
  exit_code: 0,
  duration_ms: 15,
  truncated: false
} as IRunResult;

/** A notebook's Markdown as rendered (again, after a reload): ▶ Run on each fence. */
function render(history: RunHistory): HTMLElement {
  const root = document.createElement('div');
  root.innerHTML =
    '<pre><code class="language-python">print(2+2)</code></pre>' +
    '<pre><code class="language-python">print(3)</code></pre>';
  document.body.appendChild(root);
  decorateCodeBlocks(
    root,
    () => undefined,
    block => {
      restoreCodeBlock(block, history);
      forgetOnClear(block, history);
    }
  );
  return root;
}

const shown = (root: HTMLElement) =>
  Array.from(root.querySelectorAll('.jp-gitpilot-output-text')).map(
    node => node.textContent
  );

describe('Clear on a ▶ Run result', () => {
  afterEach(() => {
    document.body.innerHTML = '';
    window.localStorage.clear();
  });

  it('forgets what was kept for that block only, so a reload does not bring it back', () => {
    const history = new RunHistory(window.localStorage);
    history.put('python', 'print(2+2)', [['stdout', '4\n']], RESULT);
    history.put('python', 'print(3)', [['stdout', '3\n']], RESULT);
    const before = render(history);
    expect(shown(before)).toEqual(['4\n', '3\n']);

    const clear = Array.from(
      before.querySelectorAll<HTMLButtonElement>('.jp-gitpilot-output-action')
    ).find(button => button.textContent === 'Clear')!;
    clear.click();
    expect(shown(before)).toEqual(['', '3\n']);

    // The notebook is reopened: a new history reads the same storage.
    document.body.innerHTML = '';
    const reloaded = render(new RunHistory(window.localStorage));
    expect(shown(reloaded)).toEqual(['3\n']);
    const kept = JSON.parse(window.localStorage.getItem(STORAGE_KEY)!);
    expect(Object.keys(kept)).toHaveLength(1);
  });
});
