// Files out: the list under a run's result, its download links, images inline, and a
// file the server no longer keeps.

import { formatSize, imageType, renderRunFiles } from '../src/outfiles';
import { OutputView } from '../src/render';
import { ResponseError } from '../src/request';
import type { IDisplayOutput } from '../src/types';
import { result } from './fixtures';
import { click, flush } from './support';

/** A blob-like answer (jsdom's Blob lacks arrayBuffer and text). */
function blob(text: string): Blob {
  // Latin-1 text: one byte a character (jsdom has no TextEncoder either).
  const bytes = Uint8Array.from(text, char => char.charCodeAt(0));
  return {
    arrayBuffer: async () => bytes.buffer,
    text: async () => text
  } as unknown as Blob;
}

/** A file source answering `files` by name; any other name is gone (404). */
function source(files: Record<string, string>) {
  const fetched: string[] = [];
  return {
    fetched,
    runFileUrl: (runId: string, name: string) =>
      `/api/sandbox/runs/${runId}/files/${name}`,
    runFile: async (runId: string, name: string) => {
      fetched.push(`${runId}/${name}`);
      if (!(name in files)) {
        throw new ResponseError('no such file', 404, 'run_file_not_found');
      }
      return blob(files[name]);
    }
  };
}

const FILES = [
  { name: 'table.csv', size: 2048, sha256: 'sha256:' + 'a'.repeat(64) },
  { name: 'plots/red.png', size: 3, sha256: 'sha256:' + 'b'.repeat(64) }
];

describe('sizes and types', () => {
  it('says sizes in B, KB and MB', () => {
    expect(formatSize(812)).toBe('812 B');
    expect(formatSize(2048)).toBe('2.0 KB');
    expect(formatSize(3 * 1024 * 1024)).toBe('3.0 MB');
  });

  it('knows the image types by extension, nothing else', () => {
    expect(imageType('a/b.PNG')).toBe('image/png');
    expect(imageType('x.svg')).toBe('image/svg+xml');
    expect(imageType('data.csv')).toBeNull();
    expect(imageType('README')).toBeNull();
  });
});

describe('renderRunFiles', () => {
  it('lists each file with its size and a download link of the run', () => {
    const node = renderRunFiles('run_1', FILES, source({}), () =>
      document.createElement('div')
    );
    expect(node.textContent).toContain('Files out');
    const links = Array.from(node.querySelectorAll('a'));
    expect(links.map(link => link.getAttribute('href'))).toEqual([
      '/api/sandbox/runs/run_1/files/table.csv',
      '/api/sandbox/runs/run_1/files/plots/red.png'
    ]);
    expect(links[1].download).toBe('red.png');
    expect(links[0].getAttribute('aria-label')).toBe(
      'Download table.csv (2.0 KB)'
    );
    expect(node.textContent).toContain('2.0 KB');
  });

  it('shows images inline through the renderer, base64 as a MIME bundle', async () => {
    const shown: IDisplayOutput[] = [];
    const files = source({ 'plots/red.png': 'PNG' });
    const node = renderRunFiles('run_1', FILES, files, item => {
      shown.push(item);
      return document.createElement('img');
    });
    await flush();
    await flush();
    expect(files.fetched).toEqual(['run_1/plots/red.png']); // not the CSV
    expect(shown).toHaveLength(1);
    expect(shown[0].data['image/png']).toBe(btoa('PNG'));
    expect(node.querySelectorAll('.jp-gitpilot-run-image img')).toHaveLength(1);
  });

  it('says "no longer kept" for a file the server no longer has', async () => {
    const node = renderRunFiles('run_1', FILES, source({}), () =>
      document.createElement('div')
    );
    await flush();
    await flush();
    // The image's fetch found it gone; the CSV says so once clicked.
    const png = node.querySelector('[data-name="plots/red.png"]');
    expect(png?.textContent).toContain('no longer kept');
    expect(png?.querySelector('a')).toBeNull();
    click(node.querySelector('[data-name="table.csv"] a'));
    await flush();
    await flush();
    const csv = node.querySelector('[data-name="table.csv"]');
    expect(csv?.textContent).toContain('no longer kept');
    expect(csv?.querySelector('a')).toBeNull();
  });

  it('lists names only when there is nowhere to download from', () => {
    const node = renderRunFiles('run_1', FILES, null, () =>
      document.createElement('div')
    );
    expect(node.querySelectorAll('a')).toHaveLength(0);
    expect(node.textContent).toContain('table.csv');
  });
});

describe('OutputView with files', () => {
  it('shows the files out under the output when the run ends, gone on Clear', () => {
    const view = new OutputView('', undefined, source({ 'table.csv': 'a,b' }));
    view.finish(result({ files: [FILES[0]] }));
    expect(view.node.querySelector('.jp-gitpilot-run-files')).not.toBeNull();
    view.clear();
    expect(view.node.querySelector('.jp-gitpilot-run-files')).toBeNull();
  });

  it('shows no files section for a run that left none', () => {
    const view = new OutputView();
    view.finish(result());
    expect(view.node.querySelector('.jp-gitpilot-run-files')).toBeNull();
  });
});
