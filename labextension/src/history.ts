/**
 * ▶ Run results that survive reopening a notebook or Markdown file.
 *
 * Kept in the browser's local storage, keyed by the block's language and code, so a
 * block shows its last result again when it is rendered anew (reopened, re-rendered
 * after an edit elsewhere). Not in the cell's metadata: that would mark the notebook
 * modified on every run, and a Markdown file has no metadata. Bounded: the newest
 * `MAX_ENTRIES` results, each's output cut to `MAX_OUTPUT` characters.
 */

import type { IRunResult } from './types';

/** The storage key. */
export const STORAGE_KEY = 'gitpilot-jupyter:code-block-runs';
/** How many results are kept (the oldest go first). */
export const MAX_ENTRIES = 50;
/** How many characters of a result's output are kept. */
export const MAX_OUTPUT = 20_000;

/** One output chunk, as streamed. */
export type Segment = ['stdout' | 'stderr', string];

/** A stored run: its output, its envelope without the output, and when it ended. */
export interface IStoredRun {
  segments: Segment[];
  result: IRunResult;
  at: number;
}

/** A short stable key for a block (FNV-1a of language and code). */
export function blockKey(language: string, code: string): string {
  let hash = 0x811c9dc5;
  const text = `${language}\n${code}`;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return `${language}:${text.length}:${hash.toString(16)}`;
}

function defaultStorage(): Storage | null {
  try {
    return window.localStorage;
  } catch {
    return null; // storage disabled: results are simply not kept
  }
}

/** The last result of each code block, in local storage. */
export class RunHistory {
  constructor(private readonly storage: Storage | null = defaultStorage()) {}

  private load(): Record<string, IStoredRun> {
    try {
      const raw = this.storage?.getItem(STORAGE_KEY);
      const data = raw ? JSON.parse(raw) : {};
      return data && typeof data === 'object' ? data : {};
    } catch {
      return {};
    }
  }

  /** The last stored run of this block, or null. */
  get(language: string, code: string): IStoredRun | null {
    return this.load()[blockKey(language, code)] ?? null;
  }

  /** Forget this block's run (its output was cleared: a reload must not bring it back). */
  forget(language: string, code: string): void {
    const entries = this.load();
    const key = blockKey(language, code);
    if (!this.storage || !(key in entries)) {
      return;
    }
    delete entries[key];
    try {
      this.storage.setItem(STORAGE_KEY, JSON.stringify(entries));
    } catch {
      // Storage refused the write: nothing more can be done from here.
    }
  }

  /** Keep this block's run (replacing its previous one). */
  put(
    language: string,
    code: string,
    segments: Segment[],
    result: IRunResult,
    at = Date.now()
  ): void {
    if (!this.storage) {
      return;
    }
    let room = MAX_OUTPUT;
    const kept: Segment[] = [];
    for (const [stream, text] of segments) {
      if (room <= 0) {
        break;
      }
      kept.push([stream, text.slice(0, room)]);
      room -= text.length;
    }
    const entries = this.load();
    entries[blockKey(language, code)] = {
      segments: kept,
      result: {
        ...result,
        stdout: '',
        stderr: '',
        truncated: result.truncated || room < 0
      },
      at
    };
    const newest = Object.entries(entries)
      .sort((a, b) => b[1].at - a[1].at)
      .slice(0, MAX_ENTRIES);
    try {
      this.storage.setItem(
        STORAGE_KEY,
        JSON.stringify(Object.fromEntries(newest))
      );
    } catch {
      // Over the browser's quota: the result is still shown, only not kept.
    }
  }
}
