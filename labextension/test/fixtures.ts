// Shapes the tests build their answers from.

import type { IRunResult } from '../src/types';

/** A python run's envelope that exited 0 and printed `4`, with `overrides`. */
export function result(overrides: Partial<IRunResult> = {}): IRunResult {
  return {
    backend: 'subprocess',
    language: 'python',
    command: ['python', 'inline.py'],
    exit_code: 0,
    stdout: '4\n',
    stderr: '',
    duration_ms: 15,
    truncated: false,
    timed_out: false,
    sandbox_id: null,
    run_id: 'run_1',
    plan_id: null,
    isolation: [],
    ...overrides
  };
}
