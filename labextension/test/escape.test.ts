// The escaping rule of approval views agrees with its Python twin on the shared cases.

import { readFileSync } from 'fs';
import { join } from 'path';

import {
  codePreview,
  escapeSegments,
  escapeText,
  ICodePreview
} from '../src/escape';
import { PLAN_CODE_LINES, renderPlan } from '../src/render';
import type { IPlan } from '../src/types';

interface ICases {
  escape: Array<{
    text: string;
    escaped: string;
    segments: Array<[string, boolean]>;
  }>;
  preview: Array<
    ICodePreview & { code: string; max_lines: number; max_line_chars: number }
  >;
}

const cases: ICases = JSON.parse(
  readFileSync(
    join(__dirname, '..', '..', 'tests', 'unit', 'display_cases.json'),
    'utf-8'
  )
);

describe('escapeText (same cases as gitpilot_jupyter/sandbox/display.py)', () => {
  it.each(cases.escape.map(c => [c.escaped, c]))('%s', (_name, c) => {
    expect(escapeText(c.text)).toBe(c.escaped);
    expect(escapeSegments(c.text)).toEqual(c.segments);
  });

  it('leaves no terminal escape or bidi override in what it shows', () => {
    const shown = escapeText("print('safe')\x1b[2K\x1b[1G\u202eexec(x)");
    expect(shown.includes('\x1b') || shown.includes('\u202e')).toBe(false);
    expect(shown).toContain('\\x1b[2K');
    expect(shown).toContain('\\u202e');
  });
});

describe('codePreview (same cases as display.code_preview)', () => {
  it.each(cases.preview.map(c => [escapeText(c.code).slice(0, 40), c]))(
    '%s',
    (_name, c) => {
      const preview = codePreview(c.code, c.max_lines, c.max_line_chars);
      expect(preview).toEqual({
        lines: c.lines,
        total_lines: c.total_lines,
        hidden_lines: c.hidden_lines,
        cut_lines: c.cut_lines,
        escaped: c.escaped,
        notes: c.notes
      });
    }
  );
});

describe('renderPlan (the lab dialog and Pending Plans) cannot be made to lie', () => {
  function hostile(code: string): IPlan {
    return {
      plan_id: 'plan_0123456789abcdef',
      goal: 'Run evil\u202egnp.py',
      source: 'api',
      language: 'python',
      command: ['python', 'inline.py'],
      backend: 'subprocess',
      timeout_sec: 120,
      network: false,
      checks: [],
      warnings: [],
      blocked: false,
      blocked_reason: null,
      requires_approval: true,
      digest: 'sha256:' + 'ab'.repeat(32),
      created_at: 0,
      code,
      file: 'evil\u202egnp.py',
      session: null
    };
  }

  it('marks escapes, counts hidden lines and shows the digest', () => {
    const code =
      "print('safe')\x1b[2K\x1b[1G\nx = 1 # \u202eevil\n" +
      Array.from({ length: PLAN_CODE_LINES + 3 }, (_, i) => `print(${i})`).join(
        '\n'
      ) +
      "\n__import__('os').system('id')\n";
    const node = renderPlan(hostile(code));
    const text = node.textContent ?? '';
    expect(text.includes('\x1b') || text.includes('\u202e')).toBe(false);
    expect(text).toContain("print('safe')\\x1b[2K\\x1b[1G");
    expect(node.querySelectorAll('.jp-gitpilot-escape')).toHaveLength(3);
    expect(text).toContain('6 more lines not shown (the code has 506)');
    expect(text).toContain(
      '3 hidden or look-alike characters shown as escapes'
    );
    expect(text).toContain('sha256:' + 'ab'.repeat(32));
    expect(text).toContain('evil\\u202egnp.py');
  });

  it('says when a line is cut, and how much of it', () => {
    const node = renderPlan(
      hostile('x = 1' + ' '.repeat(2000) + "; os.system('id')")
    );
    expect(node.querySelector('.jp-gitpilot-cut')?.textContent).toBe(
      ' … [1022 more characters]'
    );
    expect(node.textContent).toContain('1 line cut at 1000 characters');
  });
});
