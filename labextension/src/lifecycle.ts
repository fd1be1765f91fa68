/**
 * The MatrixLab lifecycle card of the settings panel: Install / Start / Stop with transcripts.
 */

import { Notification } from '@jupyterlab/apputils';

import { N_, trans } from './i18n';
import { el } from './render';
import type { SandboxClient } from './request';
import type {
  ILifecycleStatus,
  ILifecycleStep,
  LifecycleAction
} from './types';

const ACTIONS: ReadonlyArray<{
  action: LifecycleAction;
  label: string;
  busy: string;
  done: string;
  failed: string;
}> = [
  {
    action: 'install',
    label: N_('Install'),
    busy: N_('Pulling the Runner and sandbox images…'),
    done: N_('The MatrixLab Runner is installed.'),
    failed: N_('Installing the MatrixLab Runner failed: %1')
  },
  {
    action: 'start',
    label: N_('Start'),
    busy: N_('Starting the Runner container…'),
    done: N_('The MatrixLab Runner is running.'),
    failed: N_('Starting the MatrixLab Runner failed: %1')
  },
  {
    action: 'stop',
    label: N_('Stop'),
    busy: N_('Stopping the Runner container…'),
    done: N_('The MatrixLab Runner is stopped.'),
    failed: N_('Stopping the MatrixLab Runner failed: %1')
  }
];

/** Why the lifecycle buttons are disabled, or null when they work. */
export function lifecycleBlocker(state: ILifecycleStatus): string | null {
  if (!state.lifecycle_enabled) {
    return trans.__(
      'Disabled on this server: start Jupyter with GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1 to install, start and stop the Runner from here.'
    );
  }
  if (!state.docker_available) {
    return trans.__('Docker is not available on the server.');
  }
  return null;
}

/** The most a notification shows of Docker's reason (JupyterLab cuts longer messages). */
export const MAX_REASON = 100;

/**
 * Why a step failed, short enough for a notification: Docker's own reason, else the
 * command and its exit code. Docker wraps its errors outer to inner, so the cause is
 * at the end of its text (``...: bind: address already in use``): a long reason keeps
 * its end. The full command and output stay in the panel's transcript.
 */
export function stepFailure(step: ILifecycleStep): string {
  const lines = step.stderr
    .split('\n')
    .map(line => line.trim())
    .filter(Boolean);
  const reason = lines[lines.length - 1];
  if (!reason) {
    const command = step.cmd.split(' ').slice(0, 2).join(' ');
    return trans.__('%1 exited with %2', command, step.exit_code);
  }
  if (reason.length <= MAX_REASON) {
    return reason;
  }
  const tail = reason.slice(-(MAX_REASON - 1));
  const space = tail.indexOf(' ');
  return '…' + (space > 0 && space < 30 ? tail.slice(space + 1) : tail);
}

/** One step as a collapsible transcript: the docker command, its exit code and output. */
export function renderStep(step: ILifecycleStep): HTMLElement {
  const details = el('details', 'jp-gitpilot-step');
  const ok = step.exit_code === 0;
  details.open = !ok;
  details.appendChild(
    el(
      'summary',
      ok ? 'jp-mod-ok' : 'jp-mod-failed',
      `${ok ? '✓' : '✗'} ${step.cmd} ${trans.__('(exit %1, %2 ms)', step.exit_code, step.duration_ms)}`
    )
  );
  const text = [step.stdout, step.stderr].filter(Boolean).join('\n');
  details.appendChild(el('pre', '', text || trans.__('(no output)')));
  return details;
}

/** The card: state line, the three buttons (or the reason they are off), progress, transcript. */
export class LifecycleCard {
  readonly node = el('fieldset', 'jp-gitpilot-card jp-gitpilot-lifecycle');
  private readonly state = el('div', 'jp-gitpilot-lifecycle-state');
  private readonly reason = el('div', 'jp-gitpilot-muted');
  private readonly progress = el('div', 'jp-gitpilot-progress');
  private readonly transcript = el('div', 'jp-gitpilot-transcript');
  private readonly manual = el('details', 'jp-gitpilot-manual');
  private readonly buttons: HTMLButtonElement[] = [];
  private offReason: string | null = null;

  constructor(
    private readonly client: SandboxClient,
    private readonly onChange: () => void
  ) {
    this.node.appendChild(
      el('legend', '', trans.__('MatrixLab Runner on this server (Docker)'))
    );
    const bar = el('div', 'jp-gitpilot-buttons');
    for (const step of ACTIONS) {
      const button = el('button', 'jp-mod-styled', trans.__(step.label));
      button.type = 'button';
      button.dataset.action = step.action;
      button.addEventListener('click', () => void this.act(step));
      this.buttons.push(button);
      bar.appendChild(button);
    }
    this.progress.hidden = true;
    this.manual.hidden = true;
    this.node.append(
      this.state,
      bar,
      this.reason,
      this.progress,
      this.transcript,
      this.manual
    );
  }

  /** Why the card cannot start the Runner now, or null when its Start works. */
  get startBlocker(): string | null {
    return this.offReason;
  }

  /** Ask the server what is installed and running. */
  async load(): Promise<void> {
    try {
      this.show(await this.client.lifecycle());
    } catch (error) {
      this.state.textContent = '';
      this.setEnabled(
        false,
        error instanceof Error ? error.message : String(error)
      );
    }
  }

  private show(state: ILifecycleStatus): void {
    const docker = state.docker_available
      ? trans.__('Docker available')
      : trans.__('Docker not available');
    const installed = state.installed
      ? trans.__('Installed')
      : trans.__('Not installed');
    const running = state.running
      ? trans.__('Running')
      : trans.__('Not running');
    this.state.textContent = `${installed} · ${running} · ${docker}`;
    const blocker = lifecycleBlocker(state);
    this.setEnabled(blocker === null, blocker ?? '');
    // When the buttons are off, the same steps can still be run by hand.
    const steps = Array.isArray(state.instructions)
      ? state.instructions.map(String)
      : [];
    this.manual.hidden = blocker === null || steps.length === 0;
    this.manual.replaceChildren(
      el('summary', '', trans.__('Run these commands yourself')),
      el('pre', '', steps.join('\n'))
    );
  }

  private setEnabled(enabled: boolean, reason: string): void {
    this.offReason = enabled ? null : reason;
    for (const button of this.buttons) {
      button.disabled = !enabled;
      button.title = reason;
    }
    this.reason.textContent = reason;
  }

  private async act(step: (typeof ACTIONS)[number]): Promise<void> {
    const busy = trans.__(step.busy);
    this.buttons.forEach(b => (b.disabled = true));
    this.progress.hidden = false;
    this.progress.replaceChildren(el('progress'), el('span', '', ` ${busy}`));
    this.transcript.replaceChildren();
    const work = this.client.lifecycleAction(step.action);
    // Lifecycle actions can take minutes (an image pull): the lab's notifications follow
    // them too, so the outcome is seen even after the panel was closed.
    const outcome = work.then(answer => {
      const broken = answer.steps.find(s => s.exit_code !== 0);
      if (answer.ok === false || broken) {
        throw new Error(
          broken
            ? stepFailure(broken)
            : trans.__('see the transcript in Sandbox Settings')
        );
      }
      return null;
    });
    Notification.promise(outcome, {
      pending: { message: busy, options: { autoClose: false } },
      success: {
        message: () => trans.__(step.done),
        options: { autoClose: 5000 }
      },
      error: {
        message: reason =>
          trans.__(
            step.failed,
            reason instanceof Error ? reason.message : String(reason)
          ),
        options: { autoClose: false }
      }
    });
    try {
      const answer = await work;
      this.transcript.replaceChildren(...answer.steps.map(renderStep));
    } catch (error) {
      const message = el(
        'div',
        'jp-gitpilot-error',
        error instanceof Error ? error.message : String(error)
      );
      message.setAttribute('role', 'alert');
      this.transcript.replaceChildren(message);
    } finally {
      outcome.catch(() => undefined);
      this.progress.hidden = true;
      await this.load();
      this.onChange();
    }
  }
}
