// What a save reports, which dialogs refuse to default to approve, and where Tab goes.

import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { tabStops, trapFocus, unreachableReason } from '../src/dialog';
import { saveOutcome } from '../src/labels';
import type { IPlan } from '../src/types';

import { status } from './support';

const plan = (backend: string): IPlan => ({
  plan_id: 'p',
  goal: 'Run a python snippet (1 line)',
  source: 'code_block',
  language: 'python',
  code: 'print(1)',
  command: ['python'],
  backend,
  timeout_sec: 120,
  network: false,
  checks: [],
  warnings: [],
  blocked: false,
  requires_approval: true,
  digest: 'd',
  created_at: 0,
  session: null
});

describe('saveOutcome', () => {
  it('is a success only when the sandbox runs as saved', () => {
    expect(saveOutcome(status(), 'subprocess')).toEqual({
      type: 'success',
      message: 'Sandbox settings saved. Sandbox: Local.'
    });
  });

  it('warns when the saved backend cannot run', () => {
    const answer = saveOutcome(
      status({ backend: 'matrixlab', ok: false, error: 'connection refused' }),
      'matrixlab'
    );
    expect(answer.type).toBe('warning');
    expect(answer.message).toBe(
      'Saved. Snippets cannot run now: Sandbox: MatrixLab — unreachable (connection refused).'
    );
  });

  it('warns when a save leaves the sandbox off: runs are no longer contained', () => {
    const off = status({
      backend: 'off',
      settings: { ...status().settings, backend: 'off' }
    });
    const switched = saveOutcome(off, 'off');
    expect(switched.type).toBe('warning');
    expect(switched.message).toMatch(
      /^Saved\. Runs are no longer contained: Pass-through has no isolation/
    );
    // Another setting saved while off: still a warning, said as "still".
    const still = saveOutcome(off, undefined);
    expect(still.type).toBe('warning');
    expect(still.message).toMatch(/^Saved\. Runs are still not contained: /);
  });

  it('warns when the environment overrides the choice', () => {
    const answer = saveOutcome(
      status({ env_override: 'GITPILOT_SANDBOX_BACKEND' }),
      'matrixlab'
    );
    expect(answer.type).toBe('warning');
    expect(answer.message).toContain('GITPILOT_SANDBOX_BACKEND');
  });
});

describe('unreachableReason', () => {
  it('names the outage of a MatrixLab plan only', () => {
    const down = status({ backend: 'matrixlab', ok: false, error: 'refused' });
    expect(unreachableReason(plan('matrixlab'), down)).toBe('refused');
    expect(unreachableReason(plan('matrixlab'), status())).toBeNull();
    expect(unreachableReason(plan('subprocess'), down)).toBeNull();
    expect(unreachableReason(plan('matrixlab'), null)).toBeNull();
  });
});

describe('trapFocus', () => {
  it('wraps Tab past a disabled last button back to the first control', () => {
    const body = document.createElement('div');
    const box = document.createElement('input');
    box.type = 'checkbox';
    body.appendChild(box);
    const dialog = new Dialog({
      body: new Widget({ node: body }),
      buttons: [Dialog.cancelButton(), Dialog.okButton()]
    });
    document.body.appendChild(dialog.node);
    const [cancel, ok] = Array.from(
      dialog.node.querySelectorAll<HTMLButtonElement>('.jp-Dialog-button')
    );
    ok.disabled = true;
    trapFocus(dialog);
    expect(tabStops(dialog.node)).not.toContain(ok);
    cancel.focus();
    const tab = (shiftKey = false) =>
      dialog.node.dispatchEvent(
        new KeyboardEvent('keydown', { key: 'Tab', shiftKey, bubbles: true })
      );
    tab();
    expect(document.activeElement).not.toBe(document.body);
    expect(dialog.node.contains(document.activeElement)).toBe(true);
    box.focus();
    tab(true);
    expect(dialog.node.contains(document.activeElement)).toBe(true);
    dialog.dispose();
  });
});
