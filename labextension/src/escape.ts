/**
 * The TypeScript twin of `gitpilot_jupyter/sandbox/display.py`: how every approval view
 * shows a plan's code. Both are tested against the same cases (tests/unit/display_cases.json).
 *
 * A character is shown as an escape (`\x1b`, `\u202e`, `\U000e0041`) when its Unicode
 * category is Cc (controls, except newline and tab), Cf (format: bidi controls, zero-width
 * characters, BOM, tag characters), Zl, Zp or Cs (a lone surrogate). Lines split on `\n` only.
 */

/** Lines of code an approval view shows before it says how many more there are. */
export const PREVIEW_LINES = 40;
/** Characters of one line shown before the view says how many more the line has. */
export const PREVIEW_LINE_CHARS = 240;

const ESCAPED = /^[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]$/u;

/** True when the code point `char` must be shown as an escape. */
export function needsEscape(char: string): boolean {
  return char !== '\n' && char !== '\t' && ESCAPED.test(char);
}

/** `char` as a visible escape: `\xNN`, `\uNNNN` or `\UNNNNNNNN`. */
export function escapeChar(char: string): string {
  const point = char.codePointAt(0) ?? 0;
  const hex = point.toString(16);
  if (point < 0x100) {
    return `\\x${hex.padStart(2, '0')}`;
  }
  if (point < 0x10000) {
    return `\\u${hex.padStart(4, '0')}`;
  }
  return `\\U${hex.padStart(8, '0')}`;
}

/** `text` cut into `[piece, escaped]` runs, so a view can mark escapes visibly. */
export function escapeSegments(text: string): Array<[string, boolean]> {
  const segments: Array<[string, boolean]> = [];
  let plain = '';
  for (const char of text) {
    if (needsEscape(char)) {
      if (plain) {
        segments.push([plain, false]);
        plain = '';
      }
      segments.push([escapeChar(char), true]);
    } else {
      plain += char;
    }
  }
  if (plain) {
    segments.push([plain, false]);
  }
  return segments;
}

/** `text` with every control, format and bidi character shown as an escape. */
export function escapeText(text: string): string {
  return escapeSegments(text)
    .map(([piece]) => piece)
    .join('');
}

/** How many characters of `text` a view shows escaped. */
export function countEscapes(text: string): number {
  let count = 0;
  for (const char of text) {
    count += needsEscape(char) ? 1 : 0;
  }
  return count;
}

/** What a view shows of a plan's code, and what it must say it left out. */
export interface ICodePreview {
  lines: string[];
  total_lines: number;
  hidden_lines: number;
  cut_lines: number;
  escaped: number;
  notes: string[];
}

/** `code` split on `\n` (a final newline does not start another line). */
export function codeLines(code: string): string[] {
  const lines = code.split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') {
    lines.pop();
  }
  return lines;
}

/** `line` escaped and cut to `limit` characters (code points) of the original. */
export function cutLine(
  line: string,
  limit = PREVIEW_LINE_CHARS
): [string, boolean] {
  const chars = Array.from(line);
  if (chars.length <= limit) {
    return [escapeText(line), false];
  }
  const rest = chars.length - limit;
  const head = escapeText(chars.slice(0, limit).join(''));
  return [`${head} … [${rest} more character${rest !== 1 ? 's' : ''}]`, true];
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n !== 1 ? 's' : ''}`;
}

/** The first `maxLines` lines of `code`, escaped, with what was left out counted and said. */
export function codePreview(
  code: string,
  maxLines = PREVIEW_LINES,
  maxLineChars = PREVIEW_LINE_CHARS
): ICodePreview {
  const all = codeLines(code);
  const lines: string[] = [];
  let cut = 0;
  for (const line of all.slice(0, maxLines)) {
    const [text, wasCut] = cutLine(line, maxLineChars);
    lines.push(text);
    cut += wasCut ? 1 : 0;
  }
  const hidden = Math.max(0, all.length - maxLines);
  const escaped = countEscapes(code);
  const notes: string[] = [];
  if (hidden) {
    notes.push(
      `${plural(hidden, 'more line')} not shown (the code has ${all.length}); the digest covers all of it`
    );
  }
  if (cut) {
    notes.push(`${plural(cut, 'line')} cut at ${maxLineChars} characters`);
  }
  if (escaped) {
    notes.push(
      `${plural(escaped, 'control, format or bidi character')} shown as escapes (\\x.., \\u..)`
    );
  }
  return {
    lines,
    total_lines: all.length,
    hidden_lines: hidden,
    cut_lines: cut,
    escaped,
    notes
  };
}
