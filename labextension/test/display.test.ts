// Display outputs in ▶ Run's output: in order with the text, from a stream or a whole
// envelope, rendered by a real rendermime registry as untrusted output.

import {
  MimeModel,
  RenderMimeRegistry,
  standardRendererFactories
} from '@jupyterlab/rendermime';

import { rendermimeDisplay, svgImage } from '../src/display';
import { addRunButtons } from '../src/markdown';
import { OutputView } from '../src/render';
import { emitAll, SandboxClient } from '../src/request';
import type { IDisplayOutput } from '../src/types';
import { result } from './fixtures';

/** A red 2x1 PNG, as the server sends it (base64 text). */
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAAEElEQVR4nGP4z8DAwMDAAAAI/wH/' +
  'd7sK3gAAAABJRU5ErkJggg==';

function item(
  data: Record<string, unknown>,
  stdout_at = 0,
  metadata: Record<string, unknown> = {}
): IDisplayOutput {
  return { output_type: 'display_data', data, metadata, stdout_at };
}

/** What a view shows, in order: text pieces and `[mime]` for each display output. */
function shown(view: OutputView): string[] {
  view.flush();
  const box = view.node.querySelector('.jp-gitpilot-output-text') as Element;
  return Array.from(box.children).map(child =>
    child.classList.contains('jp-gitpilot-display')
      ? `[${(child as HTMLElement).dataset.mimeType ?? 'text'}]`
      : (child.textContent ?? '')
  );
}

/** A Markdown parser that knows fences only: enough to show where buttons would go. */
const markdownParser = {
  render: async (text: string) =>
    text.replace(
      /```(\w+)\n([\s\S]*?)```/g,
      (_all, language, code) =>
        `<pre><code class="language-${language}">${code}</code></pre>`
    )
};

function registry(): RenderMimeRegistry {
  return new RenderMimeRegistry({
    initialFactories: standardRendererFactories,
    markdownParser
  });
}

/** Let the renderers' promises settle. */
const settled = () => new Promise(resolve => setTimeout(resolve, 0));

describe('OutputView with display outputs', () => {
  it('shows a display output after the text streamed before it', () => {
    const view = new OutputView();
    view.append('stdout', 'before\n');
    view.display(item({ 'text/plain': '<Figure>' }));
    view.append('stdout', 'after\n');
    expect(shown(view)).toEqual(['before\n', '[text]', 'after\n']);
    expect(view.displayCount).toBe(1);
    // Copy takes the text only, and Clear removes the outputs too.
    expect(view.text).toBe('before\nafter\n');
    view.clear();
    expect(shown(view)).toEqual([]);
  });

  it('lists the notes of the result (a dropped output) under its summary', () => {
    const view = new OutputView();
    view.finish(result({ notes: ['display output 2 dropped: too large'] }));
    expect(
      view.node.querySelector('.jp-gitpilot-result-notes')?.textContent
    ).toBe('display output 2 dropped: too large');
  });
});

describe('emitAll (a server that answers the whole envelope)', () => {
  it('cuts stdout where each output came, counting code points', () => {
    const events: string[] = [];
    emitAll(
      result({
        stdout: '😀a\nb\n',
        stderr: 'warn\n',
        outputs: [
          item({ 'text/plain': 'one' }, 3),
          item({ 'text/plain': 'two' }, 3)
        ]
      }),
      (stream, text) => events.push(`${stream}:${text}`),
      output => events.push(`display:${output.data['text/plain']}`)
    );
    expect(events).toEqual([
      'stdout:😀a\n',
      'display:one',
      'display:two',
      'stdout:b\n',
      'stderr:warn\n'
    ]);
  });

  it('gives the text whole to a caller that shows no display outputs', () => {
    const events: string[] = [];
    emitAll(
      result({ stdout: 'ab', outputs: [item({ 'text/plain': 'x' }, 1)] }),
      (stream, text) => events.push(`${stream}:${text}`)
    );
    expect(events).toEqual(['stdout:ab']);
  });
});

describe('rendermimeDisplay (untrusted)', () => {
  it('renders a PNG as an image', async () => {
    const render = rendermimeDisplay(registry());
    const node = render(item({ 'image/png': PNG, 'text/plain': '<Figure>' }));
    await settled();
    expect(node.dataset.mimeType).toBe('image/png');
    const image = node.querySelector('img');
    expect(image?.getAttribute('src')).toBe(`data:image/png;base64,${PNG}`);
  });

  it('sanitizes HTML: a script or an event handler never reaches the page', async () => {
    const render = rendermimeDisplay(registry());
    const node = render(
      item({
        'text/html':
          '<b id="kept">bold</b><script>window.ran = 1</script>' +
          '<img src="x" onerror="window.ran = 2">',
        'text/plain': 'fallback'
      })
    );
    await settled();
    expect(node.dataset.mimeType).toBe('text/html');
    expect(node.querySelector('#kept, b')?.textContent).toBe('bold');
    expect(node.querySelector('script')).toBeNull();
    expect(node.innerHTML).not.toContain('onerror');
  });

  it('never picks a renderer that is unsafe for untrusted output', async () => {
    const render = rendermimeDisplay(registry());
    const node = render(
      item({
        'application/javascript': 'window.ran = 1',
        'text/plain': 'only text'
      })
    );
    await settled();
    expect(node.dataset.mimeType).toBe('text/plain');
    expect(node.textContent).toContain('only text');
  });

  it('shows SVG as an <img>, where its scripts cannot run', () => {
    const svg =
      '<svg xmlns="http://www.w3.org/2000/svg"><script>x()</script></svg>';
    const node = rendermimeDisplay(registry())(item({ 'image/svg+xml': svg }));
    const image = node.querySelector('img');
    expect(image?.src).toBe(svgImage(svg).src);
    expect(image?.src.startsWith('data:image/svg+xml;charset=utf-8,')).toBe(
      true
    );
    expect(node.querySelector('svg, script')).toBeNull();
  });

  it('renders Markdown without ▶ Run buttons on its code blocks', async () => {
    const lab = registry();
    const client = new SandboxClient('/', async () => {
      throw new Error('nothing is sent: no button is clicked');
    });
    const render = addRunButtons(lab, client);
    const markdown = {
      'text/markdown': '# Title\n\n```python\nprint(1)\n```\n'
    };
    // The lab's own Markdown (a cell) has the button; a run's Markdown output has not.
    const cell = lab.createRenderer('text/markdown');
    await cell.renderModel(new MimeModel({ data: markdown, trusted: false }));
    const output = render(item(markdown));
    for (let i = 0; i < 5; i++) {
      await settled();
    }
    expect(
      cell.node.querySelector('button.jp-gitpilot-run-button')
    ).not.toBeNull();
    expect(output.dataset.mimeType).toBe('text/markdown');
    expect(output.querySelector('pre > code')?.textContent).toBe('print(1)\n');
    expect(output.querySelector('button')).toBeNull();
  });
});
