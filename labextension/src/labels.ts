/**
 * Words the UI shows for backends and health, and the fenced-code languages that get ▶ Run.
 */

import { N_, trans } from './i18n';
import type { IStatus } from './types';

/** The three backends with the names users see. */
export const BACKENDS: ReadonlyArray<{
  name: string;
  label: string;
  help: string;
}> = [
  {
    name: 'subprocess',
    label: N_('Local'),
    help: N_(
      'A child process on the server in a fresh temp dir, with the strongest OS isolation available.'
    )
  },
  {
    name: 'matrixlab',
    label: N_('MatrixLab'),
    help: N_(
      'A MatrixLab Runner runs each snippet in its own Docker container.'
    )
  },
  {
    name: 'off',
    label: N_('Pass-through'),
    help: N_(
      'No isolation: runs on the host as you, network not blocked. For local development only.'
    )
  }
];

/** What Pass-through (`off`) means, wherever it is chosen or shown. */
export const PASS_THROUGH_RISK = N_(
  "Pass-through has no isolation: every snippet runs directly on the server's host, as you, and the network is not blocked."
);

/** The label of a backend name ("Local" for `subprocess`). */
export function backendLabel(name: string | null | undefined): string {
  const label = BACKENDS.find(b => b.name === name)?.label;
  return label ? trans.__(label) : name || trans.__('unknown');
}

/** The status bar text, e.g. "Sandbox: Local" or "Sandbox: MatrixLab — unreachable". */
export function statusText(
  status: IStatus | null,
  fetchError: string | null
): string {
  if (fetchError !== null || status === null) {
    return trans.__('Sandbox: unavailable');
  }
  if (!status.backend) {
    return trans.__('Sandbox: misconfigured');
  }
  const label = trans.__('Sandbox: %1', backendLabel(status.backend));
  if (status.ok) {
    return label;
  }
  // A Runner that answered (its /health is the status's `remote`) is not unreachable: it
  // refuses, e.g. every run when the settings make them network-on there.
  return status.backend === 'matrixlab' && !status.remote
    ? trans.__('%1 — unreachable', label)
    : trans.__('%1 — error', label);
}

/** " · 2 plans waiting" for the status bar, or "" when none wait. */
export function waitingText(count: number): string {
  if (count <= 0) {
    return '';
  }
  return ` · ${trans._n('%1 plan waiting', '%1 plans waiting', count)}`;
}

/** The tooltip's last line. */
export const CLICK_TO_OPEN = (): string =>
  trans.__('Click to open the sandbox settings.');

/** The tooltip: the error in full, and the env var that overrides the saved choice. */
export function statusTitle(
  status: IStatus | null,
  fetchError: string | null
): string {
  if (fetchError !== null || status === null) {
    return trans.__(
      'The sandbox did not answer: %1',
      fetchError ?? trans.__('no status yet')
    );
  }
  const lines = [statusText(status, null)];
  if (status.error) {
    lines.push(status.error);
  }
  if (status.backend === 'off') {
    lines.push(
      trans.__('Warning: %1', trans.__(PASS_THROUGH_RISK)),
      trans.__(
        'To change it, choose Local or MatrixLab in the sandbox settings.'
      )
    );
  }
  if (status.env_override) {
    lines.push(
      trans.__(
        'Overridden by the environment variable %1.',
        status.env_override
      )
    );
  }
  lines.push(CLICK_TO_OPEN());
  return lines.join('\n');
}

const FENCE_LANGUAGES: Record<string, string> = {
  python: 'python',
  py: 'python',
  python3: 'python',
  javascript: 'javascript',
  js: 'javascript',
  node: 'javascript',
  nodejs: 'javascript',
  bash: 'bash',
  sh: 'bash',
  shell: 'bash'
};

/**
 * The runnable language of a fenced block's info string, or null.
 *
 * The server canonicalises again (it is the authority); this only decides which
 * blocks get a ▶ Run button.
 */
export function fenceLanguage(info: string | null | undefined): string | null {
  const key = (info ?? '').trim().toLowerCase();
  return FENCE_LANGUAGES[key] ?? null;
}

/** File extensions "Run in Sandbox" offers, with their language. */
export const FILE_LANGUAGES: Record<string, string> = {
  '.py': 'python',
  '.js': 'javascript',
  '.sh': 'bash'
};

/** The runnable language of a file path, or null. */
export function fileLanguage(path: string): string | null {
  const dot = path.lastIndexOf('.');
  return dot < 0
    ? null
    : (FILE_LANGUAGES[path.slice(dot).toLowerCase()] ?? null);
}

/** Under the token field (gitpilot_jupyter/sandbox/settings.py TOKEN_NOTE has the same words). */
export const TOKEN_NOTE = N_(
  'Write-only: a saved token is never shown again. It is only sent to the URL it was ' +
    'saved with: saving a new URL clears it, and Test connection of an unsaved URL sends ' +
    'no saved token.'
);

/** What a save did, as the lab's notification shows it. */
export interface ISaveOutcome {
  message: string;
  /** `success` only when the sandbox now runs as the user meant; else `warning`. */
  type: 'success' | 'warning';
}

/**
 * The outcome of saving settings, from the status the server answered: a save the
 * environment overrides, one that leaves the sandbox off (Pass-through), or one that
 * leaves the backend unable to run, is no success.
 */
export function saveOutcome(
  status: IStatus,
  wanted?: string | null
): ISaveOutcome {
  const now = statusText(status, null);
  if (status.env_override && wanted && status.backend !== wanted) {
    return {
      type: 'warning',
      message: trans.__(
        "Saved. %1 is set in the server's environment and wins: %2.",
        status.env_override,
        now
      )
    };
  }
  if (status.backend === 'off') {
    // Saved as asked, but no success: from now on nothing is contained.
    return {
      type: 'warning',
      message:
        wanted === 'off'
          ? trans.__(
              'Saved. Runs are no longer contained: %1',
              trans.__(PASS_THROUGH_RISK)
            )
          : trans.__(
              'Saved. Runs are still not contained: %1',
              trans.__(PASS_THROUGH_RISK)
            )
    };
  }
  if (!status.ok) {
    return {
      type: 'warning',
      message: trans.__(
        'Saved. Snippets cannot run now: %1.',
        status.error ? `${now} (${status.error})` : now
      )
    };
  }
  return {
    type: 'success',
    message: trans.__('Sandbox settings saved. %1.', now)
  };
}
