/**
 * The TypeScript twin of `gitpilot_jupyter/sandbox/display.py`: how every approval view
 * shows a plan's code. Both are tested against the same cases (tests/unit/display_cases.json).
 *
 * A character is shown as an escape (`\x1b`, `\u202e`, `\U000e0041`) when its Unicode
 * category is Cc (controls, except newline and tab), Cf (format: bidi controls, zero-width
 * characters, BOM, tag characters), Zl, Zp or Cs (a lone surrogate); when it is a
 * default-ignorable code point (the Hangul fillers Python accepts in names, variation
 * selectors); when it is not ASCII but folds to ASCII letters or digits under NFKC (as
 * Python folds names: fullwidth, mathematical letters); and when it is a Greek, Cyrillic,
 * Armenian or Cherokee letter in a word that also has a Latin letter. Lines split on `\n` only.
 */

/** Lines of code an approval view shows before it says how many more there are. */
export const PREVIEW_LINES = 40;
/** Characters of one line shown before the view says how many more the line has. */
export const PREVIEW_LINE_CHARS = 240;

const ESCAPED = /^[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]$/u;
const IN_WORD = /^[\p{L}\p{M}\p{N}\p{Pc}]$/u;
const ASCII_ALNUM = /^[A-Za-z0-9]+$/;
const LATIN = /[A-Za-z]/;

/** Default-ignorable code points, inclusive ranges (display.py's INVISIBLE_RANGES). */
const INVISIBLE_RANGES: Array<[number, number]> = [
  [0x00ad, 0x00ad],
  [0x034f, 0x034f],
  [0x061c, 0x061c],
  [0x115f, 0x1160],
  [0x17b4, 0x17b5],
  [0x180b, 0x180f],
  [0x200b, 0x200f],
  [0x202a, 0x202e],
  [0x2060, 0x206f],
  [0x3164, 0x3164],
  [0xfe00, 0xfe0f],
  [0xfeff, 0xfeff],
  [0xffa0, 0xffa0],
  [0xfff0, 0xfff8],
  [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a],
  [0xe0000, 0xe0fff]
];

/** Letters that pass for Latin ones beside them (display.py's LOOKALIKE_RANGES). */
const LOOKALIKE_RANGES: Array<[number, number]> = [
  [0x0370, 0x03ff],
  [0x0400, 0x052f],
  [0x0530, 0x058f],
  [0x13a0, 0x13ff],
  [0x1c80, 0x1c8f],
  [0x1d00, 0x1d7f],
  [0x1f00, 0x1fff],
  [0x2de0, 0x2dff],
  [0xa640, 0xa69f],
  [0xab70, 0xabbf]
];

function within(char: string, ranges: Array<[number, number]>): boolean {
  const point = char.codePointAt(0) ?? 0;
  return ranges.some(([low, high]) => low <= point && point <= high);
}

function foldsToAscii(char: string): boolean {
  return (
    (char.codePointAt(0) ?? 0) > 0x7f &&
    ASCII_ALNUM.test(char.normalize('NFKC'))
  );
}

/** True when the code point `char` must be shown as an escape wherever it stands. */
export function needsEscape(char: string): boolean {
  if (char === '\n' || char === '\t') {
    return false;
  }
  return (
    ESCAPED.test(char) || within(char, INVISIBLE_RANGES) || foldsToAscii(char)
  );
}

/** For each code point of `text`: whether a view shows it as an escape. */
export function escapeFlags(text: string): boolean[] {
  const chars = Array.from(text);
  const flags = chars.map(needsEscape);
  let start = 0;
  for (let end = 0; end <= chars.length; end++) {
    if (end < chars.length && IN_WORD.test(chars[end])) {
      continue;
    }
    const word = chars.slice(start, end);
    if (word.some(char => LATIN.test(char))) {
      word.forEach((char, offset) => {
        if (within(char, LOOKALIKE_RANGES)) {
          flags[start + offset] = true;
        }
      });
    }
    start = end + 1;
  }
  return flags;
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
  const flags = escapeFlags(text);
  for (const [index, char] of Array.from(text).entries()) {
    if (flags[index]) {
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

/** `text` with every control, format, bidi, invisible and look-alike character escaped. */
export function escapeText(text: string): string {
  return escapeSegments(text)
    .map(([piece]) => piece)
    .join('');
}

/** How many characters of `text` a view shows escaped. */
export function countEscapes(text: string): number {
  return escapeFlags(text).filter(Boolean).length;
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
      `${plural(escaped, 'hidden or look-alike character')} shown as escapes (\\x.., \\u..)`
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
